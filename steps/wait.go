package steps

import (
	"context"
	"fmt"
	"time"

	"github.com/prflow/prflow/steps/duration"
	"github.com/prflow/prflow/steps/template"
)

// Wait parks for `duration` (Harness's Wait step; also a soak time between environments). It
// holds no worker while it waits.
func init() {
	Register(Definition{
		Type:   "Wait",
		New:    func() Step { return StepFunc(runWait) },
		Inputs: []Input{{Name: "duration", Type: InputDuration, Required: true, Doc: "how long to wait, e.g. 10m"}},
		Validate: func(in map[string]any) error {
			s, ok := in["duration"].(string)
			if !ok {
				return fmt.Errorf("duration: required, e.g. \"10m\"")
			}
			if _, err := duration.Parse(s); err != nil && !template.Contains(s) {
				return fmt.Errorf("duration: %w", err)
			}
			return nil
		},
	})
}

type waitMemo struct {
	Until time.Time `json:"until"`
}

func runWait(_ context.Context, sc *Context) (Result, error) {
	var m waitMemo
	if ok, err := sc.DecodeMemo(&m); err != nil || !ok {
		s, _ := sc.Inputs["duration"].(string)
		d, err := duration.Parse(s)
		if err != nil {
			return Result{}, Terminalf("duration: %w", err)
		}
		m.Until = time.Now().Add(d)
	}
	if !time.Now().Before(m.Until) {
		return Done(map[string]any{"waitedUntil": m.Until.UTC().Format(time.RFC3339)}), nil
	}
	return Park(Wait{Poll: time.Until(m.Until), Reason: "waiting until " + m.Until.UTC().Format(time.RFC3339)}, m), nil
}
