package controller

import (
	"time"

	"github.com/prflow/prflow/queue"
)

// runURL is the link notifications carry to a run's page: under --external-url when the
// server has one, else none (a path alone is useless in an e-mail or a chat message).
func (c *Controller) runURL(run string) string {
	return c.feedback.Load().RunURL(run)
}

// notifySince bounds the events a controller republishes after a redelivery or a restart
// (pipelines.Machine.NotifyJobsSince) to those recent enough that the workers' sent marks
// still hold them: half the marks' age.
func notifySince() time.Time { return time.Now().Add(-queue.NotifyMarkAge / 2) }
