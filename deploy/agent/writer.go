package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Writer keeps an agent's app records in prflow-apps. It writes a record only when it changed
// (ObservedAt aside), so a watcher wakes only on real changes; it never lets an older Argo CD
// resourceVersion overwrite a newer one, even when another replica wrote in between; and it
// rewrites InventoryKey when the set of apps changes. Safe for concurrent use.
type Writer struct {
	kv    jetstream.KeyValue
	agent string
	log   *slog.Logger

	mu        sync.Mutex
	known     map[string]*written // by KV key
	tombs     map[string]int64    // deleted key → resourceVersion of the deletion
	invDirty  bool
	writes    atomic.Int64
	inventory atomic.Int64
}

type written struct {
	ref      string
	cmp      []byte // the record with ObservedAt cleared
	rev      uint64 // KV revision
	rv       int64  // Argo CD resourceVersion (0: unknown)
	identity string // what FetchLinkedApps selects on: labels, owner, destination
}

// NewWriter returns a writer for agentID's records in kv (the prflow-apps bucket).
func NewWriter(kv jetstream.KeyValue, agentID string, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{kv: kv, agent: agentID, log: log, known: map[string]*written{}, tombs: map[string]int64{}}
}

// Writes is the number of records written (puts and deletes), for tests and metrics.
func (w *Writer) Writes() int64 { return w.writes.Load() }

// Seed loads the records already in the bucket for this agent, so a new leader neither
// rewrites unchanged records (waking every parked step) nor forgets to delete stale ones.
func (w *Writer) Seed(ctx context.Context) error {
	lister, err := w.kv.ListKeysFiltered(ctx, Token(w.agent)+".*")
	if err != nil {
		return fmt.Errorf("list prflow-apps keys of agent %s: %w", w.agent, err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		if k == InventoryKey(w.agent) {
			continue
		}
		e, err := w.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var s AppStatus
		if DecodeStatus(e.Value(), &s) != nil {
			continue
		}
		w.known[k] = &written{ref: s.Ref(), cmp: comparable(s), rev: e.Revision(), rv: parseRV(s.ResourceVersion), identity: identity(s)}
	}
	return nil
}

// Put writes s if it differs from what is stored. It reports whether it wrote.
func (w *Writer) Put(ctx context.Context, s AppStatus) (bool, error) {
	s.V, s.Agent = Version, w.agent
	key := StatusKey(w.agent, s.Ref())
	cmp := comparable(s)
	rv := parseRV(s.ResourceVersion)
	if s.ObservedAt.IsZero() {
		s.ObservedAt = time.Now().UTC()
	}
	if s.ConfirmedAt.IsZero() && s.Stale == nil {
		s.ConfirmedAt = s.ObservedAt
	}
	body, err := json.Marshal(s)
	if err != nil {
		return false, fmt.Errorf("encode status of %s: %w", s.Ref(), err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, ok := w.tombs[key]; ok && rv != 0 && rv <= t {
		return false, nil // an older view of an app we already saw deleted
	}
	delete(w.tombs, key)
	prev := w.known[key]
	if prev != nil && rv != 0 && prev.rv > rv {
		return false, nil // older than what we have
	}
	if prev != nil && bytes.Equal(prev.cmp, cmp) {
		prev.rv = max(prev.rv, rv)
		return false, nil
	}
	var rev uint64
	if prev != nil {
		rev, err = w.kv.Update(ctx, key, body, prev.rev)
	} else {
		rev, err = w.kv.Create(ctx, key, body)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSequence(err) {
		// Someone else (another replica, an older leader) wrote meanwhile: keep the newer.
		e, gerr := w.kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			rev, err = w.kv.Create(ctx, key, body)
		case gerr != nil:
			return false, fmt.Errorf("status of %s: %w", s.Ref(), gerr)
		default:
			var cur AppStatus
			if DecodeStatus(e.Value(), &cur) == nil && rv != 0 && parseRV(cur.ResourceVersion) > rv {
				w.known[key] = &written{ref: cur.Ref(), cmp: comparable(cur), rev: e.Revision(), rv: parseRV(cur.ResourceVersion), identity: identity(cur)}
				return false, nil
			}
			rev, err = w.kv.Update(ctx, key, body, e.Revision())
		}
	}
	if err != nil {
		return false, fmt.Errorf("write status of %s to prflow-apps: %w", s.Ref(), err)
	}
	id := identity(s)
	if prev == nil || prev.identity != id {
		w.invDirty = true
	}
	w.known[key] = &written{ref: s.Ref(), cmp: cmp, rev: rev, rv: rv, identity: id}
	w.writes.Add(1)
	return true, nil
}

func isWrongLastSequence(err error) bool {
	return err != nil && strings.Contains(err.Error(), "wrong last sequence")
}

// MarkStale marks every record of this agent stale (the agent lost its backend), keeping the
// rest of each record as last seen, so readers stop deciding on it. Records already marked
// stale keep their first Since. The next Put of each app (the re-list after recovery) clears
// the mark. It returns how many records it marked.
func (w *Writer) MarkStale(ctx context.Context, st Staleness) (int, error) {
	w.mu.Lock()
	keys := sortedKeys(w.known)
	w.mu.Unlock()
	n := 0
	var first error
	for _, key := range keys {
		for try := 0; try < 3; try++ {
			e, err := w.kv.Get(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			if err != nil {
				if first == nil {
					first = fmt.Errorf("mark %s stale: %w", key, err)
				}
				break
			}
			var s AppStatus
			if DecodeStatus(e.Value(), &s) != nil || s.Agent != w.agent {
				break
			}
			if s.Stale != nil {
				w.refresh(key, s, e.Revision())
				break
			}
			s.Stale = &Staleness{Since: st.Since.UTC(), Reason: st.Reason}
			s.ObservedAt = time.Now().UTC()
			body, _ := json.Marshal(s)
			rev, err := w.kv.Update(ctx, key, body, e.Revision())
			if err == nil {
				w.refresh(key, s, rev)
				w.writes.Add(1)
				n++
				break
			}
			if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSequence(err) {
				if first == nil {
					first = fmt.Errorf("mark %s stale: %w", key, err)
				}
				break
			}
		}
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
	return n, first
}

// refresh records what the bucket now holds for key.
func (w *Writer) refresh(key string, s AppStatus, rev uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.known[key]
	if p == nil {
		return // deleted meanwhile
	}
	p.cmp, p.rev = comparable(s), rev
}

// Delete removes an app's record (the app was deleted). rv is the resourceVersion of the
// deletion ("" when unknown); an older Put for the app is ignored afterwards.
func (w *Writer) Delete(ctx context.Context, ref, rv string) error {
	key := StatusKey(w.agent, ref)
	w.mu.Lock()
	defer w.mu.Unlock()
	n := parseRV(rv)
	if prev := w.known[key]; prev != nil && n != 0 && prev.rv > n {
		return nil
	}
	w.tombs[key] = n
	if _, ok := w.known[key]; !ok {
		return nil
	}
	if err := w.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete status of %s from prflow-apps: %w", ref, err)
	}
	delete(w.known, key)
	w.invDirty = true
	w.writes.Add(1)
	return nil
}

// Retain deletes every known app that is not in present, unless the writer saw it at a
// resourceVersion newer than listRV (created after the list was taken). Use it after a full
// list of the backend.
func (w *Writer) Retain(ctx context.Context, present map[string]bool, listRV string) error {
	lrv := parseRV(listRV)
	w.mu.Lock()
	var gone []string
	for _, k := range sortedKeys(w.known) {
		p := w.known[k]
		if !present[p.ref] && (lrv == 0 || p.rv <= lrv) {
			gone = append(gone, p.ref)
		}
	}
	w.mu.Unlock()
	var first error
	for _, ref := range gone {
		if err := w.Delete(ctx, ref, listRV); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Known returns the refs of the apps the writer currently has records for, sorted.
func (w *Writer) Known() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.known))
	for _, p := range w.known {
		out = append(out, p.ref)
	}
	sort.Strings(out)
	return out
}

// FlushInventory rewrites InventoryKey if the set of apps changed since the last flush.
func (w *Writer) FlushInventory(ctx context.Context) error {
	w.mu.Lock()
	if !w.invDirty {
		w.mu.Unlock()
		return nil
	}
	w.invDirty = false
	n := len(w.known)
	w.mu.Unlock()
	b, _ := json.Marshal(Inventory{V: Version, Apps: n, Updated: time.Now().UTC()})
	if _, err := w.kv.Put(ctx, InventoryKey(w.agent), b); err != nil {
		w.mu.Lock()
		w.invDirty = true
		w.mu.Unlock()
		return fmt.Errorf("write inventory of agent %s: %w", w.agent, err)
	}
	w.inventory.Add(1)
	return nil
}

// comparable is the record without what changes on every observation: ObservedAt, and Argo
// CD's resourceVersion, which moves whenever Argo CD touches the object (reconciledAt).
func comparable(s AppStatus) []byte {
	s.V = Version
	s.ObservedAt = time.Time{}
	s.ConfirmedAt = time.Time{}
	s.ResourceVersion = ""
	b, _ := json.Marshal(s)
	return b
}

func identity(s AppStatus) string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + s.Labels[k] + ",")
	}
	b.WriteString("|" + s.ApplicationSet + "|" + s.Cluster + "|" + s.Namespace + "|" + s.Project)
	return b.String()
}

func parseRV(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
