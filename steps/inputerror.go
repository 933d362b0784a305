package steps

import "fmt"

// InputError is a Validate error about one input, named by its path under `with`
// ("filePath", "filePaths[1]", "variables[0].name"), so that the loader can point at
// that field's line and column rather than at `with:`.
type InputError struct {
	Field string
	Err   error
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %v", e.Field, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }

// inputErr returns an *InputError for field.
func inputErr(field string, format string, a ...any) error {
	return &InputError{Field: field, Err: fmt.Errorf(format, a...)}
}
