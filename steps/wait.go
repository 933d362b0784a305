package steps

import (
	"context"
	"time"
)

// Wait parks for `duration` (Harness's Wait step; also a soak time between environments). It
// holds no worker while it waits.
func init() {
	Register(Definition{
		Type:   "Wait",
		Priors: NoPriors,
		New:    func() Step { return StepFunc(runWait) },
		Config: waitConfig{},
	})
}

// waitConfig is Wait's `with:`.
type waitConfig struct {
	Duration time.Duration `input:"duration,required" doc:"how long to wait, e.g. 10m"`
}

type waitMemo struct {
	Until time.Time `json:"until"`
}

func runWait(_ context.Context, sc *Context) (Result, error) {
	var m waitMemo
	if ok, err := sc.DecodeMemo(&m); err != nil || !ok {
		cfg, err := Decode[waitConfig](sc.Inputs, false)
		if err != nil {
			return Result{}, Terminal(err)
		}
		m.Until = time.Now().Add(cfg.Duration)
	}
	if !time.Now().Before(m.Until) {
		return Done(map[string]any{"waitedUntil": m.Until.UTC().Format(time.RFC3339)}), nil
	}
	return Park(Wait{Poll: time.Until(m.Until), Reason: "waiting until " + m.Until.UTC().Format(time.RFC3339)}, m), nil
}
