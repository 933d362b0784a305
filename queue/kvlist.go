package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directList lists a bucket's keys with one batched direct get of the last message of every
// matching subject (JetStream's "multi_last", server 2.11 and later) instead of a watch.
//
// A watch is an ephemeral ordered consumer: the server creates it (a routed API request, a
// consumer, a subscription) and deletes it again for every listing. A GitOpsSync step lists
// its agent's registrations each time it runs, so with many parked runs consumer creates and
// deletes were about a tenth of the process's CPU (BenchmarkParkedGitOpsSync's profile). A
// direct get is one request the stream answers from its index.
//
// It is used only where a direct get reads what the bucket's own Get reads (direct gets on,
// not a mirror, the default API prefix): a follower answering may lag a write by as much as
// it does for Get. Whatever it cannot answer completely (more than the server sends in one
// batch, a server without multi_last, no responder) it reports as not done, and the caller
// lists with a watch.
type directList struct {
	nc     *nats.Conn
	api    string // $JS.API.DIRECT.GET.<stream>
	prefix string // $KV.<bucket>.
	// off: a request went unanswered for a whole attempt, as a publish the user's NATS
	// permissions deny does (the server drops it and tells only the connection's error
	// handler). The watch lists from then on.
	off atomic.Bool
}

// directLister returns the direct lister for kv's bucket, or nil when a direct get would not
// read what Get reads or the stream cannot be asked.
func directLister(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) *directList {
	if o := js.Options(); o.APIPrefix != "" || o.Domain != "" {
		return nil
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || s.StreamInfo() == nil {
		return nil
	}
	cfg := s.StreamInfo().Config
	if !cfg.AllowDirect || cfg.Mirror != nil || len(cfg.Sources) > 0 || cfg.Name != "KV_"+kv.Bucket() {
		return nil
	}
	return &directList{nc: js.Conn(), api: "$JS.API.DIRECT.GET." + cfg.Name, prefix: "$KV." + kv.Bucket() + "."}
}

// directBatch is the most last messages a server sends for one multi_last request (its
// maxAllowedResponses); a listing with more matching keys is answered 413 and done by watch.
const directBatch = 1024

// errDirectIncomplete: the server's answer was not a whole listing; list with a watch.
var errDirectIncomplete = errors.New("direct listing incomplete")

// keys lists the keys matching filters (KV key patterns) whose last entry is not a delete or
// purge marker, sorted. It returns errDirectIncomplete when the caller must list another way,
// and an error lostReply recognises when the answer did not come in time.
func (d *directList) keys(ctx context.Context, filters []string) ([]string, error) {
	subjects := make([]string, len(filters))
	for i, f := range filters {
		subjects[i] = d.prefix + f
	}
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{subjects})
	if err != nil {
		return nil, err
	}
	// Room for every message one answer can hold, so none is dropped: a sync subscription
	// would allocate its default 65,536-message buffer for every listing (most of the
	// listing's CPU in the profile).
	ch := make(chan *nats.Msg, directBatch+2)
	inbox := d.nc.NewInbox()
	sub, err := d.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := d.nc.PublishRequest(d.api, inbox, req); err != nil {
		return nil, err
	}
	var keys []string
	for answered := false; ; answered = true {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			if !answered {
				d.off.Store(true)
				return nil, fmt.Errorf("%w: no answer from %s (not permitted?)", errDirectIncomplete, d.api)
			}
			return nil, errListUnfinished // asked again by read while the caller's ctx lives
		}
		if status := m.Header.Get("Status"); status != "" {
			switch {
			case status == "204" && m.Header.Get("Nats-Num-Pending") == "0":
				slices.Sort(keys)
				return slices.Compact(keys), nil
			case status == "404" && len(keys) == 0 && strings.EqualFold(m.Header.Get("Description"), "No Results"):
				return nil, nil
			case status == "503": // no responders: this stream does not answer direct gets
				d.off.Store(true)
				return nil, fmt.Errorf("%w: %s %s", errDirectIncomplete, status, m.Header.Get("Description"))
			default: // 413 Too Many Results, an end with messages still pending, an older server
				return nil, fmt.Errorf("%w: %s %s", errDirectIncomplete, status, m.Header.Get("Description"))
			}
		}
		subj := m.Header.Get(jetstream.SubjectHeader)
		key, ok := strings.CutPrefix(subj, d.prefix)
		if !ok {
			return nil, fmt.Errorf("%w: subject %q is not in the bucket", errDirectIncomplete, subj)
		}
		if deleted(m.Header) {
			continue
		}
		keys = append(keys, key)
	}
}

// deleted reports whether a bucket message is a delete or purge: the KV client's own marker,
// or a marker the server wrote when a key's entry aged out or was removed (as nats.go reads them).
func deleted(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	case "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge", "Remove":
			return true
		}
	}
	return false
}
