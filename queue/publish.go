package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes a clustered server answers for a moment and then stops answering:
// they are worth a retry.
const (
	// errCodeDuplicateInProcess: a message with the same Nats-Msg-Id is being proposed to the
	// stream's raft group right now (two controller replicas publishing one wake). A single
	// server never says it; a cluster does. A retry gets the duplicate's PubAck.
	errCodeDuplicateInProcess jetstream.ErrorCode = 10158
	// errCodeClusterNotAvailable: "JetStream system temporarily unavailable" during elections.
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008
)

// publishBackoff bounds the waits between publish attempts.
const (
	publishBackoffMin = 50 * time.Millisecond
	publishBackoffMax = 2 * time.Second
)

// Retryable reports whether a JetStream publish that failed with err may be sent again: the
// stream has no leader yet (no responders, cluster unavailable), or a duplicate of it is in
// flight. A timeout counts only for a message with a Nats-Msg-Id (dedup), since it may have
// been stored.
func Retryable(err error, hasMsgID bool) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeDuplicateInProcess:
			return true
		case errCodeClusterNotAvailable:
			return true
		}
		return false
	}
	// No responders (the stream has no leader): nothing was stored. jetstream reports it as
	// ErrNoStreamResponse once its own two quick retries are spent.
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	if hasMsgID && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)) {
		return true
	}
	return false
}

// Publish publishes data on a stream subject (with a Nats-Msg-Id when msgID is set) and, on a
// cluster, rides out a leader election or a concurrent duplicate: retryable failures (see
// Retryable) are tried again with capped backoff until ctx ends. Each attempt waits at most
// attempt (5 s when 0) for the stream's ack.
func Publish(ctx context.Context, js jetstream.JetStream, subject string, data []byte, msgID string, attempt time.Duration) (*jetstream.PubAck, error) {
	if attempt <= 0 {
		attempt = 5 * time.Second
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	wait := publishBackoffMin
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, attempt)
		ack, err := js.Publish(actx, subject, data, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if ctx.Err() != nil || !Retryable(err, msgID != "") {
			if n > 1 {
				return nil, fmt.Errorf("publish %s (%d attempts): %w", subject, n, err)
			}
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("publish %s (%d attempts): %w (gave up: %w)", subject, n, err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, publishBackoffMax)
	}
}
