package pipelines

import (
	"strings"
	"testing"

	"github.com/prflow/prflow/steps"
)

// promotion.create (and an environment's own create, which wins) reach each environment's
// update step; a create that is not a boolean is refused at its line.
func TestPromotionCreate(t *testing.T) {
	p, err := Load("p.yaml", []byte(promoSrc("  create: false\n", "    - dev\n    - {name: staging, create: true}\n")), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []any{false, true} {
		if got := p.Stages[i].Steps[0].With.Static()["create"]; got != want {
			t.Errorf("stage %s: update create = %v, want %v", p.Stages[i].ID, got, want)
		}
	}
	p, err = Load("p.yaml", []byte(promoSrc("", "    - dev\n")), steps.Default)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := p.Stages[0].Steps[0].With.Static()["create"]; ok {
		t.Errorf("create = %v without promotion.create; want it left to the step's default", v)
	}
	_, err = Load("p.yaml", []byte(promoSrc("  create: maybe\n", "    - dev\n")), steps.Default)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:18:11: promotion.create") || strings.Count(err.Error(), "create") != 1 {
		t.Errorf("create: maybe: %v", err)
	}
}
