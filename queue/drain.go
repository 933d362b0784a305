package queue

import (
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DrainConsumer drains cc and waits until it is closed or nc is. A consumer whose connection
// was closed under it (a killed process, a test's crash) may never report Closed (nats.go
// issue 1875), so waiting on Closed alone can hang a shutdown for good.
func DrainConsumer(cc jetstream.ConsumeContext, nc *nats.Conn) {
	cc.Drain()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-cc.Closed():
			return
		case <-t.C:
			if nc.IsClosed() {
				return
			}
		}
	}
}
