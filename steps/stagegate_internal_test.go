package steps

import (
	"strings"
	"testing"
	"time"
)

// TestStageGateInputs: StageGate reads stageGateConfig: soak and agentOutageTimeout decode as
// durations (0 and absent are the defaults), and a bad value or a key the loader never writes
// is a terminal error naming it.
func TestStageGateInputs(t *testing.T) {
	cfg, err := Decode[stageGateConfig](map[string]any{"condition": "true", "soak": "1d", "agentOutageTimeout": "0"}, false)
	if err != nil || cfg.Soak != 24*time.Hour || cfg.outageTimeout() != defaultOutageTimeout || cfg.Condition != "true" {
		t.Fatalf("%+v %v", cfg, err)
	}
	if cfg, _ := Decode[stageGateConfig](map[string]any{"agentOutageTimeout": "90s"}, false); cfg.outageTimeout() != 90*time.Second {
		t.Errorf("agentOutageTimeout 90s: %v", cfg.outageTimeout())
	}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{map[string]any{"soak": "ten minutes"}, "soak: "},
		{map[string]any{"agentOutageTimeout": "soon"}, "agentOutageTimeout: "},
		{map[string]any{"soak": "1m", "sok": "1m"}, "sok: unknown input"},
	} {
		_, err := runStageGate(t.Context(), &Context{Inputs: c.in})
		if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want a terminal error with %q", c.in, err, c.want)
		}
	}
	d, _ := Default.Lookup("StageGate")
	if err := d.Validate(map[string]any{"condition": "all(apps, {.health ==", "soak": "1m"}); err == nil || !strings.Contains(err.Error(), "condition: ") {
		t.Errorf("bad condition at load: %v", err)
	}
}
