package environments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/queue"
)

// The history of an environment is one key of prflow-envs (queue.EnvHistoryKey): its last
// MaxHistory promotions, newest first. Every replica builds the same entries from the runs
// and writes those that differ from the stored ones with a revision-checked update, so two
// replicas never store an entry twice (an entry is keyed by run and stage inside the list)
// and the list outlives the runs that retention removes.

// MaxHistory is how many promotions an environment's history keeps.
const MaxHistory = 50

// maxInputBytes bounds the inputs a history entry keeps (they are there to roll back to);
// larger inputs are left out of the entry.
const maxInputBytes = 8 << 10

type storedHistory struct {
	Environment string      `json:"environment"`
	Promotions  []Promotion `json:"promotions"`
}

// store puts ps into env's history, replacing entries of the same run and stage.
func (m *Model) store(ctx context.Context, env string, ps []Promotion) error {
	ps = slices.Clone(ps)
	for i := range ps {
		if b, _ := json.Marshal(ps[i].Inputs); len(b) > maxInputBytes {
			ps[i].Inputs = nil
		}
	}
	key := queue.EnvHistoryKey(env)
	for range 20 {
		var h storedHistory
		var rev uint64
		e, err := m.src.History.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read %s/%s: %w", queue.BucketEnvs, key, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &h); err != nil {
				return fmt.Errorf("%s/%s: %w", queue.BucketEnvs, key, err)
			}
		}
		next := merge(h.Promotions, ps)
		if len(next) > MaxHistory {
			next = next[:MaxHistory]
		}
		if reflect.DeepEqual(roundTrip(next), roundTrip(h.Promotions)) {
			return nil // stored already (by another replica), or older than the last kept
		}
		data, err := json.Marshal(storedHistory{Environment: env, Promotions: next})
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = m.src.History.Create(ctx, key, data)
		} else {
			_, err = m.src.History.Update(ctx, key, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another replica wrote meanwhile: merge into its list
		}
		if err != nil {
			return fmt.Errorf("write %s/%s: %w", queue.BucketEnvs, key, err)
		}
		return nil
	}
	return fmt.Errorf("write %s/%s: too many concurrent updates", queue.BucketEnvs, key)
}

// roundTrip is v as it reads back from JSON (numbers as float64), for comparing a list
// built in memory with a stored one.
func roundTrip(v []Promotion) any {
	b, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// merge returns base with the entries of add put in (an entry of the same run and stage is
// replaced), newest first.
func merge(base, add []Promotion) []Promotion {
	out := make([]Promotion, 0, len(base)+len(add))
	idx := map[string]int{}
	for _, list := range [][]Promotion{base, add} {
		for _, p := range list {
			k := p.Run + "/" + p.Stage
			if i, ok := idx[k]; ok {
				out[i] = p
				continue
			}
			idx[k] = len(out)
			out = append(out, p)
		}
	}
	sortHistory(out)
	return out
}

func (m *Model) applyHistory(_ context.Context, e jetstream.KeyValueEntry) bool {
	if strings.HasPrefix(e.Key(), queue.EnvReadPrefix) {
		return m.applyReadEntry(e)
	}
	var h storedHistory
	if e.Operation() != jetstream.KeyValuePut || json.Unmarshal(e.Value(), &h) != nil || h.Environment == "" {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stored[h.Environment] = h.Promotions
	for _, p := range h.Promotions {
		// What is stored need not be written again (by this replica after a restart either).
		enc, _ := json.Marshal(p)
		m.written[p.Run+"/"+p.Stage] = string(enc)
	}
	return true
}
