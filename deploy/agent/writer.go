package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
	tombs     map[string]*tomb    // deleted key → the deletion
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

// tomb is an app the writer saw deleted: rv guards against an older view bringing it back;
// rev is the KV revision of its tombstone record (0: none stored) and at when it was written,
// for Sweep.
type tomb struct {
	rv  int64
	rev uint64
	at  time.Time
}

// NewWriter returns a writer for agentID's records in kv (the prflow-apps bucket).
func NewWriter(kv jetstream.KeyValue, agentID string, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{kv: kv, agent: agentID, log: log, known: map[string]*written{}, tombs: map[string]*tomb{}}
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
		if s.Gone() {
			w.tombs[k] = &tomb{rv: parseRV(s.ResourceVersion), rev: e.Revision(), at: s.Deleted.At}
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
	t := w.tombs[key]
	if t != nil && rv != 0 && rv <= t.rv {
		return false, nil // an older view of an app we already saw deleted
	}
	prev := w.known[key]
	if prev != nil && rv != 0 && prev.rv > rv {
		return false, nil // older than what we have
	}
	if prev != nil && bytes.Equal(prev.cmp, cmp) {
		prev.rv = max(prev.rv, rv)
		return false, nil
	}
	var rev uint64
	switch {
	case prev != nil:
		rev, err = w.kv.Update(ctx, key, body, prev.rev)
	case t != nil && t.rev != 0:
		// The app is back (created again under the same name): replace its tombstone.
		rev, err = w.kv.Update(ctx, key, body, t.rev)
	default:
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
				if cur.Gone() {
					delete(w.known, key)
					w.tombs[key] = &tomb{rv: parseRV(cur.ResourceVersion), rev: e.Revision(), at: cur.Deleted.At}
					return false, nil
				}
				w.known[key] = &written{ref: cur.Ref(), cmp: comparable(cur), rev: e.Revision(), rv: parseRV(cur.ResourceVersion), identity: identity(cur)}
				return false, nil
			}
			rev, err = w.kv.Update(ctx, key, body, e.Revision())
		}
	}
	if err != nil {
		return false, fmt.Errorf("write status of %s to prflow-apps: %w", s.Ref(), err)
	}
	delete(w.tombs, key)
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
			if DecodeStatus(e.Value(), &s) != nil || s.Agent != w.agent || s.Gone() {
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

// Delete replaces an app's record with a tombstone (the app was deleted; why says how the
// agent knows), which keeps the app's identity and says when, so a step waiting on the app
// learns it is gone instead of finding no record. rv is the resourceVersion of the deletion
// ("" when unknown); an older Put for the app is ignored afterwards. Sweep removes the
// tombstone after TombstoneTTL.
func (w *Writer) Delete(ctx context.Context, ref, rv, why string) error {
	_, err := w.delete(ctx, ref, rv, why)
	return err
}

// delete is Delete, reporting whether it wrote a tombstone.
func (w *Writer) delete(ctx context.Context, ref, rv, why string) (bool, error) {
	key := StatusKey(w.agent, ref)
	w.mu.Lock()
	defer w.mu.Unlock()
	n := parseRV(rv)
	prev := w.known[key]
	if prev != nil && n != 0 && prev.rv > n {
		return false, nil
	}
	if prev == nil {
		if w.tombs[key] == nil {
			w.tombs[key] = &tomb{rv: n, at: time.Now()}
		}
		return false, nil
	}
	var last AppStatus
	_ = json.Unmarshal(prev.cmp, &last)
	now := time.Now().UTC()
	ts := AppStatus{V: Version, Agent: w.agent, Name: last.Name, AppNamespace: last.AppNamespace, Project: last.Project,
		Namespace: last.Namespace, Cluster: last.Cluster, ClusterServer: last.ClusterServer, ApplicationSet: last.ApplicationSet,
		URL: last.URL, UID: last.UID, CreatedAt: last.CreatedAt, ResourceVersion: rv, ObservedAt: now, ConfirmedAt: now,
		Deleted: &Deletion{At: now, Reason: why}}
	if n == 0 {
		ts.ResourceVersion = strconv.FormatInt(prev.rv, 10)
		if prev.rv == 0 {
			ts.ResourceVersion = ""
		}
	}
	body, err := json.Marshal(ts)
	if err != nil {
		return false, fmt.Errorf("encode tombstone of %s: %w", ref, err)
	}
	rev, err := w.kv.Update(ctx, key, body, prev.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || isWrongLastSequence(err) || errors.Is(err, jetstream.ErrKeyNotFound) {
		// Someone else wrote meanwhile: unless it is a newer view of the app, the app is gone.
		e, gerr := w.kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
			rev, err = w.kv.Create(ctx, key, body)
		case gerr != nil:
			return false, fmt.Errorf("tombstone of %s: %w", ref, gerr)
		default:
			var cur AppStatus
			if DecodeStatus(e.Value(), &cur) == nil && n != 0 && parseRV(cur.ResourceVersion) > n {
				return false, nil
			}
			rev, err = w.kv.Update(ctx, key, body, e.Revision())
		}
	}
	if err != nil {
		return false, fmt.Errorf("write tombstone of %s to prflow-apps: %w", ref, err)
	}
	delete(w.known, key)
	w.tombs[key] = &tomb{rv: max(n, prev.rv), rev: rev, at: now}
	w.invDirty = true
	w.writes.Add(1)
	return true, nil
}

// Sweep removes the tombstones written more than ttl ago, and forgets them. It returns how
// many it removed.
func (w *Writer) Sweep(ctx context.Context, ttl time.Duration) (int, error) {
	now := time.Now()
	type old struct {
		key string
		rev uint64
	}
	var due []old
	w.mu.Lock()
	for _, k := range sortedKeys(w.tombs) {
		t := w.tombs[k]
		if t.rev != 0 && now.Sub(t.at) >= ttl {
			due = append(due, old{k, t.rev})
		} else if t.rev == 0 && !t.at.IsZero() && now.Sub(t.at) >= ttl {
			delete(w.tombs, k)
		}
	}
	w.mu.Unlock()
	n := 0
	var first error
	for _, d := range due {
		// Only the tombstone itself: a record written since (the app is back) stays.
		err := w.kv.Delete(ctx, d.key, jetstream.LastRevision(d.rev))
		if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !isWrongLastSequence(err) && !errors.Is(err, jetstream.ErrKeyNotFound) {
			if first == nil {
				first = fmt.Errorf("remove tombstone %s from prflow-apps: %w", d.key, err)
			}
			continue
		}
		w.mu.Lock()
		if t := w.tombs[d.key]; t != nil && t.rev == d.rev {
			if err == nil {
				n++
				w.writes.Add(1)
			}
			// Keep guarding against an older view for a while, without a record.
			t.rev, t.at = 0, now
		}
		w.mu.Unlock()
	}
	return n, first
}

// Retain deletes every known app that is not in present, unless the writer saw it at a
// resourceVersion newer than listRV (created after the list was taken). Use it after a full
// list of the backend.
func (w *Writer) Retain(ctx context.Context, present map[string]bool, listRV string) error {
	_, err := w.RetainCount(ctx, present, listRV, "")
	return err
}

// RetainCount is Retain, also reporting how many tombstones it wrote; why is the tombstones'
// reason ("" for Retain's).
func (w *Writer) RetainCount(ctx context.Context, present map[string]bool, listRV, why string) (int, error) {
	if why == "" {
		why = "missing from a full list of the apps (deleted while the agent was not watching)"
	}
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
	n := 0
	for _, ref := range gone {
		wrote, err := w.delete(ctx, ref, listRV, why)
		if err != nil && first == nil {
			first = err
		}
		if wrote {
			n++
		}
	}
	return n, first
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

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
