package controller

import "strings"

// runURL is the link notifications carry to a run's page: under --external-url when the
// server has one, else the path alone.
func (c *Controller) runURL(run string) string {
	if f := c.feedback.Load(); f != nil && f.ExternalURL != "" {
		return strings.TrimRight(f.ExternalURL, "/") + "/ui/runs/" + run
	}
	return "/ui/runs/" + run
}
