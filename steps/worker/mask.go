package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
)

// Masker replaces secret values with *** wherever they appear.
type Masker struct{ r *strings.Replacer }

// NewMasker masks every non-trivial secret (shorter ones would mask ordinary words).
func NewMasker(secrets []string) *Masker {
	var pairs []string
	for _, s := range secrets {
		if len(s) < 4 {
			continue
		}
		pairs = append(pairs, s, "***")
		// Results are masked as JSON text, where a secret with quotes, backslashes, <, >,
		// & or control characters appears escaped.
		if b, err := json.Marshal(s); err == nil {
			if esc := string(b[1 : len(b)-1]); esc != s {
				pairs = append(pairs, esc, "***")
			}
		}
	}
	if len(pairs) == 0 {
		return &Masker{}
	}
	return &Masker{r: strings.NewReplacer(pairs...)}
}

// Mask returns s with secrets replaced.
func (m *Masker) Mask(s string) string {
	if m == nil || m.r == nil {
		return s
	}
	return m.r.Replace(s)
}

// maskHandler masks messages and string attributes before they reach the next handler.
type maskHandler struct {
	next slog.Handler
	m    *Masker
}

func (h maskHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h maskHandler) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, h.m.Mask(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(h.maskAttr(a))
		return true
	})
	return h.next.Handle(ctx, nr)
}

func (h maskHandler) maskAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.m.Mask(v.String()))
	case slog.KindGroup:
		var as []any
		for _, g := range v.Group() {
			as = append(as, h.maskAttr(g))
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.m.Mask(err.Error()))
		}
		return slog.String(a.Key, h.m.Mask(v.String()))
	}
	return a
}

func (h maskHandler) WithAttrs(as []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(as))
	for i, a := range as {
		masked[i] = h.maskAttr(a)
	}
	return maskHandler{h.next.WithAttrs(masked), h.m}
}

func (h maskHandler) WithGroup(name string) slog.Handler {
	return maskHandler{h.next.WithGroup(name), h.m}
}

// MaskHandler wraps h so nothing it writes contains a secret.
func MaskHandler(h slog.Handler, m *Masker) slog.Handler { return maskHandler{h, m} }

// fanout sends records to several handlers (the worker's log and the step's published log).
type fanout []slog.Handler

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool {
	for _, h := range f {
		if h.Enabled(ctx, l) {
			return true
		}
	}
	return false
}

func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range f {
		if h.Enabled(ctx, r.Level) {
			_ = h.Handle(ctx, r.Clone())
		}
	}
	return nil
}

func (f fanout) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithAttrs(as)
	}
	return out
}

func (f fanout) WithGroup(name string) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithGroup(name)
	}
	return out
}

// lazyAttrs adds attrs to base only when a record is first handled: formatting them is most
// of a logger's cost, and most steps log nothing.
type lazyAttrs struct {
	base  slog.Handler
	attrs []slog.Attr
	once  sync.Once
	h     slog.Handler
}

func (l *lazyAttrs) handler() slog.Handler {
	l.once.Do(func() { l.h = l.base.WithAttrs(l.attrs) })
	return l.h
}

func (l *lazyAttrs) Enabled(ctx context.Context, lv slog.Level) bool { return l.base.Enabled(ctx, lv) }

func (l *lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

func (l *lazyAttrs) WithAttrs(as []slog.Attr) slog.Handler { return l.handler().WithAttrs(as) }

func (l *lazyAttrs) WithGroup(name string) slog.Handler { return l.handler().WithGroup(name) }
