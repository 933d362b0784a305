package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/queue"
)

// Idempotent run starts (POST /api/v1/runs with an Idempotency-Key header). A client that lost
// the answer (the server died after creating the run, a proxy cut the connection) asks again
// with the same key and gets the run its first request started instead of a second run.
//
// The key is claimed in queue.BucketIdempotency with a create-only write that already names
// the run id the start will use; only then is the run created under that id (Start's own
// create-only write). A retry reads the claim and starts the same id: whichever request gets
// there first creates the run, every other one finds it. So a server that died between the
// claim and the run still leaves exactly one run to the retry, and two requests racing with
// the same key start one run.
const (
	// IdempotencyHeader is the request header carrying the key.
	IdempotencyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on an answer that returns the run an earlier request with the
	// same key started.
	ReplayedHeader = "Idempotency-Replayed"
	// MaxIdempotencyKey bounds a key's length.
	MaxIdempotencyKey = 255
)

// ErrKeyReused: the Idempotency-Key was used before for a different request.
var ErrKeyReused = errors.New("Idempotency-Key reused for a different request")

// CheckIdempotencyKey checks a key's length and characters: 1 to MaxIdempotencyKey of
// letters, digits and - _ . : (UUIDs, ULIDs and base64url fit).
func CheckIdempotencyKey(k string) error {
	if k == "" {
		return fmt.Errorf("%s header is empty", IdempotencyHeader)
	}
	if len(k) > MaxIdempotencyKey {
		return fmt.Errorf("%s header is %d characters long; at most %d", IdempotencyHeader, len(k), MaxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return fmt.Errorf("%s header has %q at position %d; allowed are letters, digits and - _ . :", IdempotencyHeader, c, i+1)
		}
	}
	return nil
}

// idemClaim is a claimed key's value: the run it starts and a digest of the request.
type idemClaim struct {
	Run     string    `json:"run"`
	Request string    `json:"request"`
	Created time.Time `json:"created"`
}

// idemKey is the bucket key of a caller's key: keys are per user (two users' keys never meet),
// and hashed, so any allowed key is a valid KV key.
func idemKey(user, key string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + key))
	return "run." + hex.EncodeToString(sum[:])
}

// requestDigest identifies what a start request asks for: the same key with another pipeline,
// inputs, file, run id or trigger is another request. Who sends it is part of the key already;
// where from (Remote) is not part of the request.
func requestDigest(req StartRequest) string {
	b, _ := json.Marshal(struct {
		File    string                 `json:"file"`
		Source  []byte                 `json:"source"`
		Inputs  map[string]any         `json:"inputs"`
		ID      string                 `json:"id"`
		Trigger *pipelines.TriggerInfo `json:"trigger"`
	}{req.File, req.Source, req.Inputs, req.ID, req.Trigger})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// idempotency is the controller's handle on the keys bucket and the per-key locks that make
// requests with the same key in this process wait for each other.
type idempotency struct {
	mu    sync.Mutex
	kv    jetstream.KeyValue
	locks map[string]*keyLock
}

type keyLock struct {
	mu sync.Mutex
	n  int
}

// lock serialises the requests of one key in this process: the second one waits for the
// first one's run instead of racing it to the same run id. Other replicas are kept apart by
// the create-only writes.
func (d *idempotency) lock(k string) (unlock func()) {
	d.mu.Lock()
	if d.locks == nil {
		d.locks = map[string]*keyLock{}
	}
	l := d.locks[k]
	if l == nil {
		l = &keyLock{}
		d.locks[k] = l
	}
	l.n++
	d.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		d.mu.Lock()
		if l.n--; l.n == 0 {
			delete(d.locks, k)
		}
		d.mu.Unlock()
	}
}

func (c *Controller) idempotencyKV(ctx context.Context) (jetstream.KeyValue, error) {
	c.idem.mu.Lock()
	defer c.idem.mu.Unlock()
	if c.idem.kv != nil {
		return c.idem.kv, nil
	}
	kv, err := queue.OpenIdempotencyKeys(ctx, c.conn.JS)
	if err != nil {
		return nil, err
	}
	c.idem.kv = kv
	return kv, nil
}

// claimRun claims key k for the request with digest, naming the run id it starts (id, or a
// new one), and returns the claim in force: the new one, or the one an earlier request with
// the same key made (then the run id is that request's). A claim for another request is
// ErrKeyReused.
func (c *Controller) claimRun(ctx context.Context, k, digest, id string) (idemClaim, error) {
	kv, err := c.idempotencyKV(ctx)
	if err != nil {
		return idemClaim{}, err
	}
	if id == "" {
		id = pipelines.NewRunID(time.Now())
	}
	claim := idemClaim{Run: id, Request: digest, Created: time.Now().UTC()}
	data, _ := json.Marshal(claim)
	// Bounded: each turn either claims, reads the claim in force, or saw the claim expire
	// between the create and the read.
	for range 5 {
		_, err := kv.Create(ctx, k, data)
		if err == nil {
			return claim, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return idemClaim{}, fmt.Errorf("claim %s: %w", IdempotencyHeader, err)
		}
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // expired just now: claim it afresh
		}
		if err != nil {
			return idemClaim{}, fmt.Errorf("read %s claim: %w", IdempotencyHeader, err)
		}
		var prev idemClaim
		if err := json.Unmarshal(e.Value(), &prev); err != nil || prev.Run == "" {
			return idemClaim{}, fmt.Errorf("%s claim %s in %s is unreadable (%q)", IdempotencyHeader, k, queue.BucketIdempotency, e.Value())
		}
		if prev.Request != digest {
			return idemClaim{}, fmt.Errorf("%w: this key started run %s at %s with another pipeline, file, inputs or run id; "+
				"a key stands for one request for %s: send a new key for a new run",
				ErrKeyReused, prev.Run, prev.Created.Format(time.RFC3339), queue.IdempotencyKeyAge)
		}
		return prev, nil
	}
	return idemClaim{}, fmt.Errorf("claim %s: the key kept changing", IdempotencyHeader)
}

// StartIdempotent starts req at most once per executor and key (see IdempotencyHeader): it
// returns the run and whether an earlier request with the key had started it already. The
// same key with another request is ErrKeyReused.
func (c *Controller) StartIdempotent(ctx context.Context, key string, req StartRequest) (*pipelines.Run, bool, error) {
	return c.startOnce(ctx, key, req, requestDigest(req), c.Start)
}

// startOnce runs start at most once per executor and key for the request with digest (see
// StartIdempotent); Rerun and Retry go through it with their own digests.
func (c *Controller) startOnce(ctx context.Context, key string, req StartRequest, digest string, start func(context.Context, StartRequest) (*pipelines.Run, error)) (*pipelines.Run, bool, error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	k := idemKey(req.Executor, key)
	unlock := c.idem.lock(k)
	defer unlock()
	claim, err := c.claimRun(ctx, k, digest, req.ID)
	if err != nil {
		return nil, false, err
	}
	req.ID = claim.Run
	run, err := start(ctx, req)
	if errors.Is(err, ErrExists) {
		return run, true, nil
	}
	return run, false, err
}

// actClaim records an action done under a key (the UI's cancel and decide forms).
type actClaim struct {
	Request string    `json:"request"`
	Created time.Time `json:"created"`
}

// actOnce does act at most once per user and key: a second request with the key and the same
// action (what) changes nothing and reports replayed; with another action it is ErrKeyReused.
// A failed act records nothing, so it may be tried again with the same key. The key is
// recorded after act succeeded: within this process requests with one key wait for each
// other; a request racing it on another replica may act too (cancels are idempotent by run,
// and a step counts one decision per user).
func (c *Controller) actOnce(ctx context.Context, user, key, what string, act func() error) (replayed bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	kv, err := c.idempotencyKV(ctx)
	if err != nil {
		return false, err
	}
	sum := sha256.Sum256([]byte(what))
	digest := hex.EncodeToString(sum[:])
	k := "act." + idemKey(user, key)[len("run."):]
	unlock := c.idem.lock(k)
	defer unlock()
	e, err := kv.Get(ctx, k)
	switch {
	case err == nil:
		var prev actClaim
		if json.Unmarshal(e.Value(), &prev) != nil || prev.Request != digest {
			return false, fmt.Errorf("%w: this key was sent with another action at %s; send a new key for a new action", ErrKeyReused, prev.Created.Format(time.RFC3339))
		}
		return true, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return false, fmt.Errorf("read %s: %w", IdempotencyHeader, err)
	}
	if err := act(); err != nil {
		return false, err
	}
	data, _ := json.Marshal(actClaim{Request: digest, Created: time.Now().UTC()})
	if _, err := kv.Create(ctx, k, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		c.log.Warn("action done but its idempotency key not recorded: a repeat would do it again", "user", user, "err", err)
	}
	return false, nil
}

// CancelOnce is Cancel under an idempotency key (see actOnce): the UI's cancel form sends one
// per form, so a form sent twice cancels once and answers the repeat as the first.
func (c *Controller) CancelOnce(ctx context.Context, id, user, key string) (replayed bool, err error) {
	return c.actOnce(ctx, user, key, "cancel\x00"+id, func() error { return c.Cancel(ctx, id, user) })
}

// DecideOnce is Decide under an idempotency key (see actOnce): an approval form sent twice
// records one decision.
func (c *Controller) DecideOnce(ctx context.Context, runID string, req SignalRequest, u User, key string) (replayed bool, err error) {
	what := fmt.Sprintf("decide\x00%s\x00%s\x00%s\x00%t\x00%t\x00%s", runID, req.Stage, req.Step, req.Rollback, req.Approve, req.Comment)
	return c.actOnce(ctx, u.Name, key, what, func() error { return c.Decide(ctx, runID, req, u) })
}
