package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		msgID bool
		want  bool
	}{
		{"duplicate in process", &jetstream.APIError{ErrorCode: 10158, Code: 409}, true, true},
		{"cluster unavailable", fmt.Errorf("wrapped: %w", &jetstream.APIError{ErrorCode: 10008, Code: 503}), false, true},
		{"no responders", nats.ErrNoResponders, false, true},
		{"no stream response", jetstream.ErrNoStreamResponse, false, true},
		{"timeout with msg id", context.DeadlineExceeded, true, true},
		{"timeout without msg id", context.DeadlineExceeded, false, false},
		{"wrong last sequence", &jetstream.APIError{ErrorCode: 10071, Code: 400}, true, false},
		{"message too big", &jetstream.APIError{ErrorCode: 10054, Code: 400}, true, false},
		{"other", errors.New("boom"), true, false},
	} {
		if got := Retryable(tc.err, tc.msgID); got != tc.want {
			t.Errorf("%s: Retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPublishWaitsForTheStream: a publish to a subject whose stream has no leader yet (here:
// does not exist yet, the same "no responders" a cluster answers during an election) is
// retried and lands once the stream is there; a plain js.Publish fails at once.
func TestPublishWaitsForTheStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Open(ctx, Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.JS.Publish(ctx, "late.x", []byte("1")); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("plain publish before the stream exists: %v", err)
	}
	go func() {
		time.Sleep(700 * time.Millisecond)
		_, _ = c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}})
	}()
	ack, err := Publish(ctx, c.JS, "late.x", []byte("1"), "m1", 0)
	if err != nil || ack.Stream != "LATE" {
		t.Fatalf("Publish = %+v, %v", ack, err)
	}
	// The same id again is a duplicate, not a second message.
	ack, err = Publish(ctx, c.JS, "late.x", []byte("1"), "m1", 0)
	if err != nil || !ack.Duplicate {
		t.Fatalf("second Publish = %+v, %v", ack, err)
	}
	// A mistake is not retried: it fails within its context's life, naming nothing retried.
	short, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	if _, err := Publish(short, c.JS, "late.x", []byte("1"), "m2", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "TINY", Subjects: []string{"tiny.>"}, MaxMsgSize: 4}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := Publish(short, c.JS, "tiny.x", []byte("too big"), "m3", 0); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("too-big message: %v", err)
	}
	if time.Since(start) > time.Second {
		t.Fatalf("a non-retryable error was retried for %v", time.Since(start))
	}
}
