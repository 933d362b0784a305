package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketIdempotency maps the Idempotency-Key of a run start (POST /api/v1/runs) to the run it
// starts, so a client that lost the answer and asks again gets the same run instead of a
// second one. Keys go after IdempotencyKeyAge.
const BucketIdempotency = "prflow-idempotency"

// WebhookDedupWindow is how long PRFLOW_SCM remembers a webhook delivery: a forge's
// redelivery within it starts nothing twice.
const WebhookDedupWindow = 24 * time.Hour

// IdempotencyKeyAge is how long an Idempotency-Key is kept: as long as a webhook delivery is
// deduplicated, so a retrying client and a redelivering forge get the same promise.
const IdempotencyKeyAge = WebhookDedupWindow

func idempotencyBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketIdempotency, History: 1, TTL: IdempotencyKeyAge, Storage: jetstream.FileStorage,
		Replicas: replicas, Description: "Idempotency-Key of run starts → run id"}
}

// OpenIdempotencyKeys opens the idempotency bucket, creating it (with the replicas of the locks
// bucket) when it does not exist yet, like OpenNotifyMarks: a topology from before the bucket
// gets it on first use.
// Its reads go to the stream leader (LeaderReadBuckets): a claim another replica just made
// must be seen.
func OpenIdempotencyKeys(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if _, err := openOrCreate(ctx, js, idempotencyBucketConfig); err != nil {
		return nil, err
	}
	if err := leaderReads(ctx, js, BucketIdempotency); err != nil {
		return nil, err
	}
	// Opened again: a handle reads the way the bucket said when it was opened.
	kv, err := js.KeyValue(ctx, BucketIdempotency)
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", BucketIdempotency, err)
	}
	return BoundKV(kv, 0), nil
}
