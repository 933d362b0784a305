package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"

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

// bytesValue is a size flag: a number of bytes or a Kubernetes-style quantity (512Mi, 10Gi,
// 1G), as the manifests that deploy prflow write sizes.
type bytesValue int64

func (v *bytesValue) String() string { return strconv.FormatInt(int64(*v), 10) }
func (v *bytesValue) Type() string   { return "bytes" }
func (v *bytesValue) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return fmt.Errorf("want a size such as 1073741824, 512Mi or 10Gi, got %q", s)
	}
	n := q.Value()
	if q.Sign() < 0 {
		return errors.New("must not be negative (0 means no size limit)")
	}
	if q.MilliValue() != n*1000 {
		return fmt.Errorf("%q is not a whole number of bytes", s)
	}
	*v = bytesValue(n)
	return nil
}
