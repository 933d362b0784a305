package controller

import (
	"strings"
	"time"

	"github.com/prflow/prflow/queue"
)

// runURL is the link notifications carry to a run's page: under --external-url when the
// server has one, else the path alone.
func (c *Controller) runURL(run string) string {
	if f := c.feedback.Load(); f != nil && f.ExternalURL != "" {
		return strings.TrimRight(f.ExternalURL, "/") + "/ui/runs/" + run
	}
	return "/ui/runs/" + run
}

// notifySince bounds the events a controller republishes after a redelivery or a restart
// (pipelines.Machine.NotifyJobsSince) to those recent enough that the workers' sent marks
// still hold them: half the marks' age.
func notifySince() time.Time { return time.Now().Add(-queue.NotifyMarkAge / 2) }
