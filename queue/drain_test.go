package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A consumer whose connection is closed while messages flow (a crashed replica): shutting it
// down returns instead of waiting for a Closed that may never come; a live one is drained.
func TestDrainConsumerAfterConnectionClosed(t *testing.T) {
	c := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "D", Subjects: []string{"d.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, closeFirst := range []bool{false, true} {
		nc, err := nats.Connect("", nats.InProcessServer(c.Embedded()))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		cons, err := js.CreateOrUpdateConsumer(ctx, "D", jetstream.ConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan struct{}, 1000)
		cc, err := cons.Consume(func(m jetstream.Msg) {
			_ = m.Ack()
			select {
			case got <- struct{}{}:
			default:
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50; i++ {
			if _, err := c.JS.Publish(ctx, "d.x", []byte("m")); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("no message consumed")
		}
		if closeFirst {
			nc.Close()
		}
		done := make(chan struct{})
		go func() { DrainConsumer(cc, nc); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("DrainConsumer did not return (connection closed first: %v)", closeFirst)
		}
		nc.Close()
	}
}
