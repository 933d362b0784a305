package queue

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketEnvs holds the history of each environment (pipelines/environments): one key per
// environment with its last promotions, so a controller restart or the retention of old
// runs keeps it. The environments model bounds the entries per key; the bucket bounds the
// whole.
const BucketEnvs = "prflow-envs"

// Bounds of prflow-envs: a key holds at most 50 entries of a few KiB each.
const (
	envsMaxBytes = 256 << 20
	envsMaxValue = 1 << 20
)

// EnvHistoryKey is the prflow-envs key of an environment's history.
func EnvHistoryKey(env string) string { return "env." + Token(env) }

// OpenEnvHistory opens prflow-envs, creating it (with the replicas of the locks bucket) when
// it does not exist yet, like OpenMergeQueue.
func OpenEnvHistory(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return openOrCreate(ctx, js, envsBucketConfig)
}

func envsBucketConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketEnvs, History: 1, MaxBytes: envsMaxBytes, MaxValueSize: envsMaxValue,
		Storage: jetstream.FileStorage, Replicas: replicas, Description: "environment histories, one key per environment"}
}

// EnvReadKey is the prflow-envs key of one read of release values (the environments model's
// ReadReleaseValues jobs): the request, its state and its result, cached per commit.
func EnvReadKey(id string) string { return "read." + Token(id) }

// EnvReadPrefix starts every EnvReadKey.
const EnvReadPrefix = "read."
