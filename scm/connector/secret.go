package connector

import (
	"fmt"
	"log/slog"
)

// redacted is what a Secret prints as, whatever the verb or encoder.
const redacted = "[redacted]"

// Secret holds a credential resolved from the environment or a file. It never prints its
// value: fmt (every verb, %#v included), JSON, YAML, text encoders and slog all see
// "[redacted]". Only Value returns it. The value sits behind a pointer so that even printing a
// struct that holds a Secret in an unexported field (where fmt cannot call methods) shows an
// address, not the credential.
type Secret struct{ p *string }

// NewSecret wraps a credential.
func NewSecret(v string) Secret {
	if v == "" {
		return Secret{}
	}
	return Secret{p: &v}
}

// Value returns the credential, for the code that sends it to the forge.
func (s Secret) Value() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}

// IsZero reports whether no credential is set.
func (s Secret) IsZero() bool { return s.p == nil }

func (s Secret) display() string {
	if s.p == nil {
		return ""
	}
	return redacted
}

// String implements fmt.Stringer.
func (s Secret) String() string { return s.display() }

// GoString implements fmt.GoStringer.
func (s Secret) GoString() string { return fmt.Sprintf("connector.Secret(%q)", s.display()) }

// Format implements fmt.Formatter so that no verb (%x included) reveals the value.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.display())
	default:
		if verb == 'v' && f.Flag('#') {
			_, _ = f.Write([]byte(s.GoString()))
			return
		}
		_, _ = f.Write([]byte(s.display()))
	}
}

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf("%q", s.display())), nil }

// MarshalText implements encoding.TextMarshaler.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.display()), nil }

// MarshalYAML implements yaml.Marshaler.
func (s Secret) MarshalYAML() (any, error) { return s.display(), nil }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.display()) }
