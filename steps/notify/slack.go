package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/steps"
)

// slack posts to a Slack incoming webhook (or anything that takes its payload: Mattermost,
// Rocket.Chat, Discord's /slack endpoint). The URL is the credential.
type slack struct {
	url    connector.Secret
	client *http.Client
}

func (s *slack) secrets() []string { return []string{s.url.Value()} }

func (s *slack) send(ctx context.Context, n steps.Notification) error {
	data, err := json.Marshal(map[string]any{"text": slackText(n)})
	if err != nil {
		return steps.Terminal(err)
	}
	return post(ctx, s.client, s.url.Value(), data, nil)
}

// slackText is the message in Slack's mrkdwn: the summary, the message quoted, and a link
// to the run when the URL is absolute.
func slackText(n steps.Notification) string {
	esc := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	var b strings.Builder
	b.WriteString(esc.Replace(Summary(n)))
	if n.Message != "" {
		b.WriteString("\n> " + strings.ReplaceAll(esc.Replace(n.Message), "\n", "\n> "))
	}
	if strings.HasPrefix(n.URL, "http://") || strings.HasPrefix(n.URL, "https://") {
		b.WriteString("\n<" + n.URL + "|Open the run>")
	} else if n.URL != "" {
		b.WriteString("\nRun: " + esc.Replace(n.URL))
	}
	return b.String()
}
