package queue

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: bad port", addr)
	}
	if port == 0 {
		port = -1 // nats-server: -1 picks a free port; 0 would mean 4222
	}
	return h, port, nil
}

// redactURL drops user info from a NATS URL so passwords and tokens never reach logs.
// A comma-separated list (a cluster's URLs) is redacted URL by URL.
func redactURL(s string) string {
	if strings.Contains(s, ",") {
		parts := strings.Split(s, ",")
		for i, p := range parts {
			parts[i] = redactURL(p)
		}
		return strings.Join(parts, ",")
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = url.User("redacted")
	return u.String()
}
