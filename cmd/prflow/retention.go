package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/prflow/prflow/pipelines/audit"
)

// addAuditRetention adds --audit-max-age and --audit-max-bytes (config keys audit-max-age,
// audit-max-bytes), which bound the audit stream PRFLOW_AUDIT.
func addAuditRetention(fs *pflag.FlagSet, r *audit.Retention) {
	*r = audit.DefaultRetention
	fs.Var((*ageValue)(&r.MaxAge), "audit-max-age", "how long the audit log (stream PRFLOW_AUDIT) keeps entries; 0 keeps them until --audit-max-bytes drops the oldest")
	fs.Var((*bytesValue)(&r.MaxBytes), "audit-max-bytes", "the most the audit log keeps (bytes, or 512Mi, 10Gi, 1G); the oldest entries go first; 0 = no size limit")
}

// ageValue is a duration flag that refuses negative values (where it is set, so a config
// file's error names its line).
type ageValue time.Duration

func (v *ageValue) String() string { return time.Duration(*v).String() }
func (v *ageValue) Type() string   { return "duration" }
func (v *ageValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 2160h or 30m, got %q", s)
	}
	if d < 0 {
		return errors.New("must not be negative (0 means no age limit)")
	}
	*v = ageValue(d)
	return nil
}

// bytesValue is a size flag: a number of bytes, or one with a Kubernetes-style unit (512Mi,
// 10Gi, 1G), as the manifests that deploy prflow write sizes. Parsed here rather than with
// apimachinery's resource.Quantity, which would add a CBOR codec and more to the binary.
type bytesValue int64

var sizeUnits = map[string]int64{"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}

func (v *bytesValue) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *bytesValue) Type() string   { return "bytes" }
func (v *bytesValue) Set(s string) error {
	num := strings.TrimRightFunc(s, unicode.IsLetter)
	mult, ok := sizeUnits[s[len(num):]]
	if !ok || num == "" {
		return fmt.Errorf("want a size such as 1073741824, 512Mi or 10Gi, got %q", s)
	}
	if strings.HasPrefix(num, "-") {
		return errors.New("must not be negative (0 means no size limit)")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if _, ferr := strconv.ParseFloat(num, 64); ferr == nil {
			return fmt.Errorf("%q is not a whole number of bytes", s)
		}
		return fmt.Errorf("want a size such as 1073741824, 512Mi or 10Gi, got %q", s)
	}
	if n > math.MaxInt64/mult {
		return fmt.Errorf("%q is too large", s)
	}
	*v = bytesValue(n * mult)
	return nil
}
