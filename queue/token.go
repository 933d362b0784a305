package queue

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ResultKeyName is the key of BucketMeta holding the secret controllers sign job tokens
// with. Only the server's NATS user may read it (deploy/nats/permissions.conf gives workers and
// agents the schema key alone).
const ResultKeyName = "result-key"

// ErrBadToken: a result does not carry the token of the job it claims to answer.
var ErrBadToken = errors.New("result token does not match the job")

// LoadResultKey returns the result-signing secret, creating it on first use (every replica
// ends up with the one stored first).
func LoadResultKey(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	kv, err := js.KeyValue(ctx, BucketMeta)
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", BucketMeta, err)
	}
	for range 5 {
		if e, err := kv.Get(ctx, ResultKeyName); err == nil {
			if len(e.Value()) < 32 {
				return nil, fmt.Errorf("%s/%s is %d bytes, want 32", BucketMeta, ResultKeyName, len(e.Value()))
			}
			return e.Value(), nil
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read %s/%s: %w", BucketMeta, ResultKeyName, err)
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if _, err := kv.Create(ctx, ResultKeyName, key); err == nil {
			return key, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("create %s/%s: %w", BucketMeta, ResultKeyName, err)
		}
	}
	return nil, fmt.Errorf("%s/%s: could not read or create it", BucketMeta, ResultKeyName)
}

// JobToken is the token a job carries and its result must echo: an HMAC of the job's id under
// the controllers' key. A worker learns it only from the job it was given, so it cannot
// report a result for a job it never received (another run's, another pool's).
func JobToken(key []byte, jobID string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(jobID))
	return hex.EncodeToString(m.Sum(nil)[:16])
}
