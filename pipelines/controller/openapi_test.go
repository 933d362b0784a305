package controller

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/audit"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/worker"
)

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

// jsonFields are the JSON names of a struct's exported fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIMatchesHandlers: every registered route is in the OpenAPI document and every
// documented operation is served; each schema has exactly the JSON fields of its Go type; the
// document is served without a token.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	c := &Controller{}
	served := map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true, "POST /hooks/{provider}": true}
	for _, r := range c.routes() {
		served[r.pattern] = true
	}
	for p := range served {
		if !documented[p] {
			t.Errorf("route %s is served but not in openapi.json", p)
		}
	}
	for p := range documented {
		if !served[p] {
			t.Errorf("openapi.json documents %s, which no handler serves", p)
		}
	}

	types := map[string]reflect.Type{
		"Run": reflect.TypeFor[pipelines.Run](), "RunSummary": reflect.TypeFor[RunSummary](), "StageRun": reflect.TypeFor[pipelines.StageRun](), "StepRun": reflect.TypeFor[pipelines.StepRun](),
		"TriggerInfo": reflect.TypeFor[pipelines.TriggerInfo](), "Wait": reflect.TypeFor[steps.Wait](), "Approvers": reflect.TypeFor[steps.Approvers](),
		"Signal": reflect.TypeFor[steps.Signal](), "Worker": reflect.TypeFor[worker.Info](), "LogLine": reflect.TypeFor[worker.LogLine](),
		"StartRequest": reflect.TypeFor[StartRequest](), "CheckRequest": reflect.TypeFor[CheckRequest](), "CheckResult": reflect.TypeFor[CheckResult](),
		"SignalRequest": reflect.TypeFor[SignalRequest](), "Error": reflect.TypeFor[apiError](), "AuditEntry": reflect.TypeFor[audit.Entry](), "HookResponse": reflect.TypeFor[hookResponse](),
		"PipelineInfo": reflect.TypeFor[PipelineInfo](), "InputInfo": reflect.TypeFor[InputInfo](), "RetryRequest": reflect.TypeFor[RetryRequest](), "StartByName": reflect.TypeFor[StartByName](),
		"Forbidden": reflect.TypeFor[forbiddenBody](), "CanIAnswer": reflect.TypeFor[CanIAnswer](), // rbac.go
		"InterveneRequest": reflect.TypeFor[InterveneRequest](), "Intervention": reflect.TypeFor[pipelines.Intervention](),
	}
	for name, typ := range map[string]reflect.Type{ // environments.go
		"Environment": reflect.TypeFor[environments.Environment](), "Desired": reflect.TypeFor[environments.Desired](), "EnvValue": reflect.TypeFor[environments.Value](),
		"OutsideChange": reflect.TypeFor[environments.OutsideChange](), "App": reflect.TypeFor[environments.App](), "Drift": reflect.TypeFor[environments.Drift](),
		"Promotion": reflect.TypeFor[environments.Promotion](), "Change": reflect.TypeFor[environments.Change](),
		"ValuesRead": reflect.TypeFor[environments.ValuesRead](),
	} {
		types[name] = typ
	}
	for name, typ := range types {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s (Go type %s)", name, typ)
			continue
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		if want := jsonFields(typ); !reflect.DeepEqual(props, want) {
			t.Errorf("schema %s has properties %v; Go type %s has JSON fields %v", name, props, typ, want)
		}
		for _, r := range s.Required {
			if _, ok := s.Properties[r]; !ok {
				t.Errorf("schema %s requires %s, which it does not define", name, r)
			}
		}
	}
	// Every $ref points at a schema.
	for _, m := range refRe.FindAllStringSubmatch(string(openAPI), -1) {
		if _, ok := doc.Components.Schemas[m[1]]; !ok {
			t.Errorf("$ref to an undefined schema %s", m[1])
		}
	}

	// Through the real handler: public (no token), while the API proper is not.
	c.metrics = NewMetrics(nil)
	srv := httptest.NewServer(c.Handler(&Auth{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || string(body) != string(openAPI) {
		t.Fatalf("GET /api/v1/openapi.json: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	if resp, err := http.Get(srv.URL + "/api/v1/workers"); err != nil || resp.StatusCode != 401 {
		t.Fatalf("GET /api/v1/workers without a token: %v %v", resp, err)
	}
}

var refRe = regexp.MustCompile(`"\$ref": "#/components/schemas/([A-Za-z]+)"`)

// The pipeline source travels as text; base64 (what older clients sent) is still read.
func TestSourceTextAcceptsTextAndBase64(t *testing.T) {
	src := "name: x\nstages: [{id: s, steps: [{id: a, type: Noop}]}]\n"
	for _, tc := range []struct{ name, body string }{
		{"text", `{"file":"p.yaml","source":` + mustJSON(src) + `}`},
		{"base64", `{"file":"p.yaml","source":"` + base64.StdEncoding.EncodeToString([]byte(src)) + `"}`},
	} {
		var req StartRequest
		if err := json.Unmarshal([]byte(tc.body), &req); err != nil || string(req.Source) != src {
			t.Errorf("%s: %v %q", tc.name, err, req.Source)
		}
	}
	out, _ := json.Marshal(StartRequest{Source: SourceText(src)})
	if !strings.Contains(string(out), `"source":"name: x\n`) {
		t.Errorf("encoded as %s, want the text", out)
	}
	var req StartRequest
	if err := json.Unmarshal([]byte(`{"source": 12}`), &req); err == nil {
		t.Error("a number as source was accepted")
	}
}

func mustJSON(s string) string { b, _ := json.Marshal(s); return string(b) }
