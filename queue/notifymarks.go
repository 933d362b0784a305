package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketNotify remembers which notifications workers sent (key sent.<digest of the
// notification id>), so that a notification job redelivered after its worker died between
// sending and acking is not sent twice. Keys go after NotifyMarkAge.
const BucketNotify = "prflow-notify"

// NotifyMarkAge is how long a sent mark is kept: far longer than any redelivery of a job.
const NotifyMarkAge = 24 * time.Hour

// OpenNotifyMarks opens the sent-marks bucket, creating it (with the replicas of the locks
// bucket) when it does not exist yet, like OpenMergeQueue.
func OpenNotifyMarks(ctx context.Context, js jetstream.JetStream) (*NotifyMarks, error) {
	kv, err := openOrCreate(ctx, js, notifyBucketConfig)
	if err != nil {
		return nil, err
	}
	return &NotifyMarks{kv: kv}, nil
}

func notifyBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketNotify, History: 1, TTL: NotifyMarkAge, Storage: jetstream.FileStorage,
		Replicas: replicas, Description: "notifications sent, against sending one twice"}
}

// NotifyMarks is the sent-marks bucket (steps.NotifyMarks).
type NotifyMarks struct{ kv jetstream.KeyValue }

func notifyKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "sent." + hex.EncodeToString(sum[:16])
}

// Sent reports whether the notification id was marked sent.
func (m *NotifyMarks) Sent(ctx context.Context, id string) (bool, error) {
	_, err := m.kv.Get(ctx, notifyKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", BucketNotify, err)
	}
	return true, nil
}

// MarkSent marks the notification id sent. The value is the time only: nothing of the
// notification (or a channel's secret) is stored.
func (m *NotifyMarks) MarkSent(ctx context.Context, id string) error {
	if _, err := m.kv.Put(ctx, notifyKey(id), []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		return fmt.Errorf("write %s: %w", BucketNotify, err)
	}
	return nil
}
