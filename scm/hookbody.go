package scm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
)

// DefaultWebhookMemBody is how much of a webhook body is held in memory while it is read and
// its signature computed; the rest waits in a temporary file until the signature checked out,
// so bodies nobody signed never fill the heap.
const DefaultWebhookMemBody = 1 << 20

// DefaultWebhookReadBudget bounds the webhook body bytes a server reads and parses at once
// across requests when its configuration sets no other figure: room for two bodies at
// GitHub's 25 MB cap, well inside a 512 MiB pod.
const DefaultWebhookReadBudget = 64 << 20

// ErrBusy is returned when reading a webhook body would take the server over its read budget;
// the body was not read and the forge should retry later (HTTP 503 with Retry-After).
var ErrBusy = errors.New("too many webhook bytes being read at once")

// ErrSpill is returned when the part of a body past the in-memory threshold could not be
// written to (or read back from) its temporary file: the server's fault, not the sender's.
var ErrSpill = errors.New("could not spill the webhook body")

// ReadBudget bounds the webhook body bytes being read and parsed at once across requests. A
// request reserves its Content-Length (or the body limit when it sends none) before the first
// body byte is read and gives it back when its parse is done; one that does not fit is refused
// with ErrBusy without reading anything. A nil *ReadBudget bounds nothing.
type ReadBudget struct {
	limit int64
	mu    sync.Mutex
	used  int64
}

// NewReadBudget returns a budget of limit bytes; limit ≤ 0 means DefaultWebhookReadBudget.
func NewReadBudget(limit int64) *ReadBudget {
	if limit <= 0 {
		limit = DefaultWebhookReadBudget
	}
	return &ReadBudget{limit: limit}
}

// Limit is the budget in bytes.
func (b *ReadBudget) Limit() int64 { return b.limit }

// InUse is the number of bytes reserved right now.
func (b *ReadBudget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Reserve takes n bytes of the budget, or fails with ErrBusy when they do not fit; release
// gives them back and may be called more than once.
func (b *ReadBudget) Reserve(n int64) (release func(), err error) {
	if b == nil {
		return func() {}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return nil, fmt.Errorf("%d bytes are being read, %d more would exceed the %d byte budget: %w", b.used, n, b.limit, ErrBusy)
	}
	b.used += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.used -= n
			b.mu.Unlock()
		})
	}, nil
}

// expectedMAC checks the signature header before any body byte is read and returns the
// HMAC the body must have (nil when nothing is to be computed: a header token that already
// checked out, or an unsigned delivery a development setup allows).
func (s WebhookSettings) expectedMAC(r *http.Request, secret []byte, f *HookFormat) ([]byte, error) {
	if len(secret) == 0 {
		if s.AllowUnsigned {
			return nil, nil
		}
		return nil, fmt.Errorf("no webhook secret configured: %w", ErrBadSignature)
	}
	header := r.Header.Get(f.SignatureHeader)
	if header == "" {
		return nil, fmt.Errorf("missing %s header: %w", f.SignatureHeader, ErrBadSignature)
	}
	if f.Token != nil {
		return nil, f.Token(f.SignatureHeader, header, secret)
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return nil, fmt.Errorf("%s is not of the form sha256=<hex>: %w", f.SignatureHeader, ErrBadSignature)
	}
	want, err := hex.DecodeString(hexSig)
	if err != nil {
		return nil, fmt.Errorf("%s is not hex: %w", f.SignatureHeader, ErrBadSignature)
	}
	return want, nil
}

// readVerified reads r's body for hook h after the header checks: the Content-Length against
// maxBody, a reservation in the budget, then the body (a spill file past MemBody) with its
// HMAC computed as it arrives. Only a body whose HMAC matches want is loaded into h.Body. The
// returned release gives the reservation back; it is non-nil even on error.
func (s WebhookSettings) readVerified(r *http.Request, h *Hook, f *HookFormat, secret, want []byte) (release func(), err error) {
	release = func() {}
	limit := s.MaxBody
	if limit <= 0 {
		limit = DefaultMaxWebhookBody
	}
	if r.Body == nil {
		return release, errors.New("empty body")
	}
	if r.ContentLength > limit {
		return release, fmt.Errorf("body of %d bytes exceeds the %d byte limit: %w", r.ContentLength, limit, ErrTooLarge)
	}
	reserve := r.ContentLength
	if reserve < 0 { // chunked: the most it may be
		reserve = limit
	}
	if release, err = s.Budget.Reserve(reserve); err != nil {
		return func() {}, err
	}
	var mac hash.Hash
	if want != nil {
		mac = hmac.New(sha256.New, secret)
	}
	sp, err := spoolBody(r.Body, r.ContentLength, limit, s.MemBody, s.TempDir, mac)
	if err != nil {
		return release, err
	}
	defer sp.close()
	if mac != nil && !hmac.Equal(want, mac.Sum(nil)) {
		return release, fmt.Errorf("%s does not match the body: %w", f.SignatureHeader, ErrBadSignature)
	}
	if h.Body, err = sp.bytes(); err != nil {
		return release, err
	}
	h.digestDelivery()
	return release, nil
}

// spool holds a body being read: the first bytes in memory, the rest in a temporary file.
type spool struct {
	mem    []byte
	memMax int
	file   *os.File
	dir    string
	size   int64
	werr   error // why writing the spill file failed
}

// spoolBody copies body (at most limit bytes) into a spool, writing every byte to mac too
// when it is set. contentLength sizes the in-memory part when known.
func spoolBody(body io.Reader, contentLength, limit, memMax int64, dir string, mac hash.Hash) (*spool, error) {
	if memMax <= 0 {
		memMax = DefaultWebhookMemBody
	}
	sp := &spool{memMax: int(memMax), dir: dir}
	if contentLength > 0 {
		sp.mem = make([]byte, 0, min(contentLength, memMax))
	}
	var w io.Writer = sp
	if mac != nil {
		w = io.MultiWriter(mac, sp)
	}
	n, err := io.Copy(w, io.LimitReader(body, limit+1))
	var tooBig *http.MaxBytesError
	switch {
	case sp.werr != nil: // the spill file failed, not the client
		err = sp.werr
	case err != nil && errors.As(err, &tooBig):
		err = fmt.Errorf("body exceeds the %d byte limit: %w", limit, ErrTooLarge)
	case err != nil:
		err = fmt.Errorf("read body: %w", err)
	case n > limit:
		err = fmt.Errorf("body exceeds the %d byte limit: %w", limit, ErrTooLarge)
	}
	if err != nil {
		sp.close()
		return nil, err
	}
	return sp, nil
}

func (sp *spool) Write(p []byte) (int, error) {
	n := len(p)
	if room := sp.memMax - len(sp.mem); room > 0 {
		k := min(room, len(p))
		sp.mem = append(sp.mem, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		if sp.file == nil {
			f, err := os.CreateTemp(sp.dir, "prflow-webhook-*")
			if err != nil {
				sp.werr = fmt.Errorf("%w past %d bytes to a temporary file: %w", ErrSpill, sp.memMax, err)
				return 0, sp.werr
			}
			sp.file = f
		}
		if _, err := sp.file.Write(p); err != nil {
			sp.werr = fmt.Errorf("%w to %s: %w", ErrSpill, sp.file.Name(), err)
			return 0, sp.werr
		}
	}
	sp.size += int64(n)
	return n, nil
}

// bytes is the whole body in one slice of its exact size.
func (sp *spool) bytes() ([]byte, error) {
	if sp.file == nil {
		return sp.mem, nil
	}
	out := make([]byte, sp.size)
	k := copy(out, sp.mem)
	if _, err := sp.file.ReadAt(out[k:], 0); err != nil {
		return nil, fmt.Errorf("%w: read it back from %s: %w", ErrSpill, sp.file.Name(), err)
	}
	return out, nil
}

// close removes the spill file, if any.
func (sp *spool) close() {
	if sp.file != nil {
		name := sp.file.Name()
		_ = sp.file.Close()
		_ = os.Remove(name)
		sp.file = nil
	}
	sp.mem = nil
}

// digestDelivery names a delivery that came without a delivery id by a digest of its body,
// so that redeliveries of the same body still deduplicate downstream.
func (h *Hook) digestDelivery() {
	if h.Delivery == "" {
		sum := sha256.Sum256(h.Body)
		h.Delivery = "sha256:" + hex.EncodeToString(sum[:])
	}
}
