package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// SchemaVersion is the version of the NATS topology this build creates and understands:
// stream and bucket names, subjects, retention, and the envelopes in them. Bump it with any
// change an older process would misread; Setup records it in BucketMeta, and a process finding
// a newer one refuses to run instead of corrupting state it does not understand.
const SchemaVersion = 1

// BucketMeta holds the topology's schema marker (key SchemaKey).
const (
	BucketMeta = "prflow-meta"
	SchemaKey  = "schema"
)

// Schema is the marker Setup writes.
type Schema struct {
	Version  int       `json:"version"`
	Replicas int       `json:"replicas"`
	Written  time.Time `json:"written"`
}

// ErrSchemaNewer: the topology was written by a newer prflow. Upgrade this process.
var ErrSchemaNewer = errors.New("NATS topology is newer than this prflow")

// ErrNoTopology: the streams and buckets are not there yet (no server has run Setup).
var ErrNoTopology = errors.New("prflow topology not found on NATS")

// ReadSchema returns the marker, or nil when the meta bucket or the key does not exist (a
// topology from before markers, or none at all).
func ReadSchema(ctx context.Context, js jetstream.JetStream) (*Schema, error) {
	kv, err := js.KeyValue(ctx, BucketMeta)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", BucketMeta, err)
	}
	e, err := kv.Get(ctx, SchemaKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s/%s: %w", BucketMeta, SchemaKey, err)
	}
	var s Schema
	if err := json.Unmarshal(e.Value(), &s); err != nil || s.Version <= 0 {
		return nil, fmt.Errorf("%s/%s holds %q, not a schema marker: %w", BucketMeta, SchemaKey, e.Value(), ErrSchemaNewer)
	}
	return &s, nil
}

// checkSchema refuses a marker newer than SchemaVersion.
func checkSchema(s *Schema) error {
	if s != nil && s.Version > SchemaVersion {
		return fmt.Errorf("%w: %s/%s says schema version %d, this prflow knows up to %d; "+
			"upgrade this process to the version the server runs (a server never downgrades the topology)",
			ErrSchemaNewer, BucketMeta, SchemaKey, s.Version, SchemaVersion)
	}
	return nil
}

// writeSchema records SchemaVersion unless a newer marker appeared meanwhile (CAS).
func writeSchema(ctx context.Context, js jetstream.JetStream, replicas int) error {
	kv, err := js.KeyValue(ctx, BucketMeta)
	if err != nil {
		return fmt.Errorf("KV bucket %s: %w", BucketMeta, err)
	}
	data, _ := json.Marshal(Schema{Version: SchemaVersion, Replicas: replicas, Written: time.Now().UTC()})
	for {
		e, err := kv.Get(ctx, SchemaKey)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := kv.Create(ctx, SchemaKey, data); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			} else if err != nil {
				return fmt.Errorf("write %s/%s: %w", BucketMeta, SchemaKey, err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("read %s/%s: %w", BucketMeta, SchemaKey, err)
		}
		var cur Schema
		if json.Unmarshal(e.Value(), &cur) == nil {
			if err := checkSchema(&cur); err != nil {
				return err
			}
		}
		if _, err := kv.Update(ctx, SchemaKey, data, e.Revision()); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		} else if err != nil {
			return fmt.Errorf("write %s/%s: %w", BucketMeta, SchemaKey, err)
		}
		return nil
	}
}

// Join is Setup for processes that use the topology but do not own it (workers, agents on an
// external NATS): it creates nothing, so their NATS users need no stream-admin permission. It
// refuses a newer schema at once and waits (logging, until ctx ends) while no server has
// created the topology yet.
func Join(ctx context.Context, js jetstream.JetStream, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := joinOnce(ctx, js)
		if err == nil || !errors.Is(err, ErrNoTopology) {
			return err
		}
		log.WarnContext(ctx, "waiting for a prflow server to create the NATS topology", "attempt", attempt, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func joinOnce(ctx context.Context, js jetstream.JetStream) error {
	s, err := ReadSchema(ctx, js)
	if err != nil {
		return err
	}
	if err := checkSchema(s); err != nil {
		return err
	}
	for _, name := range []string{StreamJobs, StreamEvents, StreamLogs} {
		if _, err := js.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w: stream %s is missing (start `prflow server` against this NATS first)", ErrNoTopology, name)
		} else if err != nil {
			return fmt.Errorf("stream %s: %w", name, err)
		}
	}
	if _, err := OpenBuckets(ctx, js); err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("%w: %w", ErrNoTopology, err)
		}
		return err
	}
	return nil
}
