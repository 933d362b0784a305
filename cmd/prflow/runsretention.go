package main

import (
	"errors"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/prflow/prflow/pipelines/controller"
)

// addRunsRetention adds --runs-keep-days and --runs-keep-count (config keys runs-keep-days,
// runs-keep-count), which bound prflow-runs (controller.RunRetention).
func addRunsRetention(fs *pflag.FlagSet, r *controller.RunRetention) {
	*r = controller.DefaultRunRetention
	fs.Var((*daysValue)(&r.MaxAge), "runs-keep-days", "delete finished runs that ended longer ago than this many days, each archived to the audit log first (run.archived); running, waiting and parked runs are never deleted; 0 keeps runs of any age")
	fs.Var((*countValue)(&r.KeepCount), "runs-keep-count", "keep the newest N runs; older finished runs are archived to the audit log and deleted; 0 = no count limit")
}

// daysValue is a whole number of days, kept as a duration.
type daysValue time.Duration

func (v *daysValue) String() string { return strconv.Itoa(int(time.Duration(*v) / (24 * time.Hour))) }
func (v *daysValue) Type() string   { return "days" }
func (v *daysValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number of days such as 90, got " + strconv.Quote(s))
	}
	if n < 0 {
		return errors.New("must not be negative (0 means no age limit)")
	}
	if n > 100*365 {
		return errors.New("more than 100 years: use 0 for no age limit")
	}
	*v = daysValue(time.Duration(n) * 24 * time.Hour)
	return nil
}

// countValue is a count that refuses negative numbers.
type countValue int

func (v *countValue) String() string { return strconv.Itoa(int(*v)) }
func (v *countValue) Type() string   { return "count" }
func (v *countValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number such as 10000, got " + strconv.Quote(s))
	}
	if n < 0 {
		return errors.New("must not be negative (0 means no count limit)")
	}
	*v = countValue(n)
	return nil
}
