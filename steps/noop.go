package steps

import (
	"context"
	"fmt"
)

// Noop succeeds at once. Its outputs are the `outputs` input (a map), so pipelines and tests
// can pass data between steps without touching any system.
func init() {
	Register(Definition{
		Type:   "Noop",
		Priors: NoPriors,
		New:    func() Step { return StepFunc(runNoop) },
		Inputs: []Input{
			{Name: "outputs", Type: InputMap, Doc: "returned as the step's outputs"},
			{Name: "message", Type: InputString, Doc: "logged"},
			// Naming a connector makes a Noop go only to workers holding it: a smoke test of
			// routing and of the run-start check for a pool and connector.
			{Name: "connector", Type: InputString, Doc: "run only on a worker holding this connector"},
			{Name: "connectorRef", Type: InputString, Doc: "same as connector (Harness name)"},
		},
		Validate: func(in map[string]any) error {
			if v, ok := in["outputs"]; ok {
				if _, isMap := v.(map[string]any); !isMap {
					if _, isStr := v.(string); !isStr { // an expression resolving to a map
						return fmt.Errorf("outputs: want a map, got %T", v)
					}
				}
			}
			return nil
		},
	})
}

func runNoop(_ context.Context, sc *Context) (Result, error) {
	out := map[string]any{}
	if m, ok := sc.Inputs["outputs"].(map[string]any); ok {
		for k, v := range m {
			out[k] = v
		}
	}
	if msg, ok := sc.Inputs["message"].(string); ok && sc.Log != nil {
		sc.Log.Info(msg)
	}
	return Done(out), nil
}
