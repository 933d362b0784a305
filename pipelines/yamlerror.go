package pipelines

import (
	"errors"

	"github.com/prflow/prflow/yamlconf"
)

// SyntaxError reports a YAML parse error of src as a LoadError at the line of the mistake,
// with the message once prefixed ("YAML: did not find expected key"); see
// yamlconf.SyntaxError.
func SyntaxError(file string, src []byte, err error) *LoadError {
	e := yamlconf.SyntaxError(file, src, err)
	return &LoadError{[]FieldError{{File: e.File, Line: e.Line, Col: e.Column, Msg: e.Msg}}}
}

// maxBisect bounds the files SyntaxError bisects (pipelines are far smaller).
const maxBisect = yamlconf.MaxBisect

// FromYAMLConf returns err, the problems of a file read with package yamlconf, as a
// *LoadError (the error type of pipeline files and the files that go with them, such as the
// Harness map); any other error is returned as it is.
func FromYAMLConf(err error) error {
	var es yamlconf.Errors
	if !errors.As(err, &es) {
		return err
	}
	le := &LoadError{}
	for _, e := range es {
		le.Errs = append(le.Errs, FieldError{File: e.File, Line: e.Line, Col: e.Column, Path: e.Field, Msg: e.Msg})
	}
	return le
}
