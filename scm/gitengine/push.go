package gitengine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
)

// RefUpdate is one guarded ref change in a push.
type RefUpdate struct {
	Name string // full ref name, e.g. refs/heads/main
	// Old is the SHA the remote ref must have now; "" means the ref must not exist.
	Old string
	// New is the SHA to set; "" deletes the ref.
	New string
}

// Push applies updates as one compare-and-swap on the remote: every ref must still have its
// Old value, and with more than one update the push is atomic (all or none; git
// http-backend and the forges support it). It never forces. When a ref moved, the result
// matches ErrPushRejected (and scm.ErrConflict) and nothing changes. Updates whose Old equals
// New are skipped.
//
// Only the objects this workspace wrote and that the new refs reach are sent; everything else
// they reach was fetched from the remote and is already there. (go-git's own push walks the
// whole tree of the remote head to find that out, which dominates on large repositories.)
func (w *Workspace) Push(ctx context.Context, updates ...RefUpdate) error {
	var cmds []*packp.Command
	var names []string
	allDelete := true
	for _, u := range updates {
		if !strings.HasPrefix(u.Name, "refs/") {
			return fmt.Errorf("gitengine: push %q: want a full ref name", u.Name)
		}
		for _, h := range []string{u.Old, u.New} {
			if h != "" && !shaRe.MatchString(h) {
				return fmt.Errorf("gitengine: push %s: bad SHA %q", u.Name, h)
			}
		}
		if u.Old == u.New {
			continue
		}
		c := &packp.Command{Name: plumbing.ReferenceName(u.Name)}
		if u.Old != "" {
			c.Old = plumbing.NewHash(u.Old)
		}
		if u.New != "" {
			c.New = plumbing.NewHash(u.New)
			allDelete = false
		}
		cmds = append(cmds, c)
		names = append(names, u.Name)
	}
	if len(cmds) == 0 {
		return nil
	}
	op := "push " + strings.Join(names, ", ")
	sess, err := w.receivePackSession()
	if err != nil {
		return w.wrap(op, err)
	}
	defer sess.Close()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return w.wrap(op, err)
	}
	// Refuse early when a ref already moved; the server re-checks every Old value anyway.
	for _, c := range cmds {
		cur, ok := ar.References[c.Name.String()]
		if (c.Old.IsZero() && ok) || (!c.Old.IsZero() && cur != c.Old) {
			now := "absent"
			if ok {
				now = cur.String()
			}
			return w.e.redact(fmt.Errorf("gitengine: %s to %s: %w (%s is %s, expected %s)",
				op, w.RemoteURL(), ErrPushRejected, c.Name, now, orAbsent(c.Old)))
		}
		if c.New.IsZero() && !ar.Capabilities.Supports(capability.DeleteRefs) {
			return w.wrap(op, errors.New("the remote does not allow deleting refs"))
		}
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	if len(cmds) > 1 && ar.Capabilities.Supports(capability.Atomic) {
		_ = req.Capabilities.Set(capability.Atomic)
	}
	req.Commands = cmds
	var send []plumbing.Hash
	if !allDelete {
		var news []plumbing.Hash
		for _, c := range cmds {
			if !c.New.IsZero() {
				news = append(news, c.New)
			}
		}
		if send, err = w.objectsToSend(news); err != nil {
			return w.wrap(op, err)
		}
	}
	rs, err := w.sendPack(ctx, sess, req, send, !ar.Capabilities.Supports(capability.OFSDelta), allDelete)
	if err != nil {
		return w.wrap(op, err)
	}
	if rs == nil {
		return nil // the server does not report status
	}
	if rs.UnpackStatus != "ok" {
		return w.wrap(op, fmt.Errorf("the remote could not unpack the objects: %s", rs.UnpackStatus))
	}
	for _, cs := range rs.CommandStatuses {
		if cs.Status == "ok" {
			continue
		}
		if refused(cs.Status) {
			return w.wrap(op, fmt.Errorf("the remote refused %s: %s", cs.ReferenceName, cs.Status))
		}
		return w.e.redact(fmt.Errorf("gitengine: %s to %s: %w (%s: %s)", op, w.RemoteURL(), ErrPushRejected, cs.ReferenceName, cs.Status))
	}
	return nil
}

func orAbsent(h plumbing.Hash) string {
	if h.IsZero() {
		return "absent"
	}
	return h.String()
}

// refused tells policy refusals (hooks, protected branches), which a retry cannot fix, from
// lost races ("failed to update ref", "cannot lock ref", "atomic push failure", ...).
func refused(status string) bool {
	s := strings.ToLower(status)
	for _, x := range []string{"hook declined", "protected", "denied", "not allowed", "permission"} {
		if strings.Contains(s, x) {
			return true
		}
	}
	return false
}

func (w *Workspace) receivePackSession() (transport.ReceivePackSession, error) {
	ep, err := transport.NewEndpoint(w.url)
	if err != nil {
		return nil, err
	}
	ep.InsecureSkipTLS = w.e.insecureTLS
	ep.CaBundle = w.e.caBundle
	c, err := client.NewClient(ep)
	if err != nil {
		return nil, err
	}
	return c.NewReceivePackSession(ep, w.e.auth)
}

// sendPack streams a packfile of send after the commands and returns the report status.
func (w *Workspace) sendPack(ctx context.Context, sess transport.ReceivePackSession, req *packp.ReferenceUpdateRequest,
	send []plumbing.Hash, refDeltas, allDelete bool) (*packp.ReportStatus, error) {
	if allDelete {
		rs, err := sess.ReceivePack(ctx, req)
		if rs != nil {
			return rs, nil // the session also returns the report's first error; Push reads it
		}
		return nil, err
	}
	rd, wr := io.Pipe()
	req.Packfile = rd
	done := make(chan error, 1)
	go func() {
		_, err := packfile.NewEncoder(wr, w.repo.Storer, refDeltas).Encode(send, 10)
		if err != nil {
			done <- wr.CloseWithError(err)
			return
		}
		done <- wr.Close()
	}()
	rs, err := sess.ReceivePack(ctx, req)
	if err != nil && rs == nil {
		_ = rd.CloseWithError(err)
		<-done
		return nil, err
	}
	if perr := <-done; perr != nil && rs == nil {
		return nil, perr
	}
	return rs, nil // the session also returns the report's first error; Push reads it
}

// objectsToSend walks from news through the objects this workspace wrote; objects it did not
// write came from the remote.
func (w *Workspace) objectsToSend(news []plumbing.Hash) ([]plumbing.Hash, error) {
	seen := map[plumbing.Hash]bool{}
	var out []plumbing.Hash
	stack := append([]plumbing.Hash(nil), news...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[h] || !w.store.wrote(h) {
			continue
		}
		seen[h] = true
		out = append(out, h)
		o, err := w.repo.Storer.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return nil, err
		}
		switch o.Type() {
		case plumbing.CommitObject:
			c, err := object.DecodeCommit(w.repo.Storer, o)
			if err != nil {
				return nil, err
			}
			stack = append(stack, c.TreeHash)
			stack = append(stack, c.ParentHashes...)
		case plumbing.TreeObject:
			t, err := object.DecodeTree(w.repo.Storer, o)
			if err != nil {
				return nil, err
			}
			for _, e := range t.Entries {
				if e.Mode != filemode.Submodule {
					stack = append(stack, e.Hash)
				}
			}
		}
	}
	return out, nil
}

// trackingStore records the objects the workspace writes, so that a push sends exactly those.
type trackingStore struct {
	storer.EncodedObjectStorer
	mu      sync.Mutex
	written map[plumbing.Hash]bool
}

func (t *trackingStore) SetEncodedObject(o plumbing.EncodedObject) (plumbing.Hash, error) {
	h, err := t.EncodedObjectStorer.SetEncodedObject(o)
	if err == nil {
		t.mu.Lock()
		t.written[h] = true
		t.mu.Unlock()
	}
	return h, err
}

func (t *trackingStore) wrote(h plumbing.Hash) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.written[h]
}
