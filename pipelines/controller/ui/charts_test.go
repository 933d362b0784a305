package ui_test

import (
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// TestRunPageDrawsCharts: a step's charts output (metric → SVG, as Verify writes it) is drawn
// as images on the run page, the SVG carried as a data: image (an SVG in <img> runs no
// script, whatever it holds); a charts value that is not SVG stays in the output list as text.
func TestRunPageDrawsCharts(t *testing.T) {
	t.Parallel()
	const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><text>error <rate></text><script>alert(1)</script></svg>`
	e := newUIEnv(t, ctltest.Options{}, nil)
	r := e.Start(`
name: charts
stages:
  - id: verify
    steps:
      - id: verify
        type: Noop
        with: {outputs: {charts: {"error-rate": '`+svg+`'}, verdict: successful}}
      - id: other
        type: Noop
        with: {outputs: {charts: {notes: "not a chart"}}}
`, nil)
	if f := e.Wait(r.ID, 60*time.Second); f.Status != pipelines.StSucceeded {
		t.Fatalf("run %s: %s", f.Status, f.Error)
	}
	c := signedIn(t, e, bobToken)
	code, _, body := do(t, c, "GET", e.URL+"/ui/runs/"+r.ID, nil, nil)
	if code != http.StatusOK {
		t.Fatalf("run page: %d", code)
	}
	m := regexp.MustCompile(`<figure class="chart" data-chart="error-rate"><img alt="chart of error-rate" src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no chart image for error-rate on the run page:\n%s", body)
	}
	if got, _ := base64.StdEncoding.DecodeString(m[1]); string(got) != svg {
		t.Errorf("chart image holds %q, want the step's SVG", got)
	}
	if strings.Contains(body, "<script>alert(1)</script>") {
		t.Error("the SVG's script reached the page as markup")
	}
	if strings.Count(body, `class="chart"`) != 1 || !strings.Contains(body, "not a chart") {
		t.Error("a charts value that is not an SVG must stay in the output list as text")
	}
}
