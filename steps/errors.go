package steps

import (
	"errors"
	"fmt"
)

// ErrTerminal marks an error that retrying cannot fix (bad input, missing file, conflict). The
// worker turns it into a Failed result at once. Any other error is transient and retried.
var ErrTerminal = errors.New("terminal")

type terminal struct{ err error }

func (t terminal) Error() string        { return t.err.Error() }
func (t terminal) Unwrap() error        { return t.err }
func (t terminal) Is(target error) bool { return target == ErrTerminal }

// Terminal wraps err so IsTerminal reports true.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return terminal{err}
}

// Terminalf formats a terminal error.
func Terminalf(format string, a ...any) error { return Terminal(fmt.Errorf(format, a...)) }

// IsTerminal reports whether err must not be retried.
func IsTerminal(err error) bool { return errors.Is(err, ErrTerminal) }
