package notify

import (
	"fmt"
	"strings"

	"github.com/prflow/prflow/steps"
)

// Summary is the one-line text of a notification, as chat and mail subjects show it.
func Summary(n steps.Notification) string {
	var b strings.Builder
	fmt.Fprintf(&b, "prflow %s: run %s of pipeline %s", n.Event, n.Run, n.Pipeline)
	if n.Stage != "" {
		fmt.Fprintf(&b, ", stage %s", n.Stage)
		if n.Step != "" {
			fmt.Fprintf(&b, ", step %s", n.Step)
		}
	}
	if n.Status != "" {
		fmt.Fprintf(&b, " (%s)", n.Status)
	}
	return b.String()
}

// body is the longer text: the summary, the message (error or wait reason) and the link.
func body(n steps.Notification) string {
	var b strings.Builder
	b.WriteString(Summary(n))
	b.WriteString("\n")
	if n.Message != "" {
		b.WriteString("\n" + n.Message + "\n")
	}
	if n.Executor != "" {
		b.WriteString("\nStarted by " + n.Executor + "\n")
	}
	if n.URL != "" {
		b.WriteString("\nRun: " + n.URL + "\n")
	}
	return b.String()
}
