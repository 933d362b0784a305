package scmconformance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/connector"
	"github.com/prflow/prflow/scm/scmtest"
)

// Fake is the part of a scmtest fake forge the connector check needs.
type Fake interface {
	APIURL() string
	CreateRepo(owner, name string, files map[string]string) (string, error)
}

// Registered checks that the driver called name is in the default connector registry, builds
// it from a connectors file pointing at fake and runs the connector check (Whoami +
// RepoExists): a good token sees its repo and a clear not-found, a bad one is unauthorized
// without its value in the error. Each forge driver's tests call it.
func Registered(t *testing.T, name string, fake Fake) {
	t.Helper()
	if !slices.Contains(connector.Registered(), name) {
		t.Fatalf("%s is not registered: %v", name, connector.Registered())
	}
	if _, err := fake.CreateRepo("acme", "release", map[string]string{"a": "b"}); err != nil {
		t.Fatal(err)
	}
	cfg := "connectors:\n  - name: c1\n    provider: " + name + "\n    baseURL: " + fake.APIURL() + "\n    auth:\n      token: env:TOKEN\n"
	lookup := func(token string) connector.LoadOption {
		return connector.WithLookupEnv(func(k string) (string, bool) { return token, k == "TOKEN" })
	}
	set, err := connector.Parse([]byte(cfg), "connectors.yaml", lookup(scmtest.DefaultToken))
	if err != nil {
		t.Fatal(err)
	}
	res := set.Check(context.Background(), map[string][]scm.Repo{"c1": {"acme/release", "acme/missing"}})
	if len(res) != 1 || res[0].Err != nil || res[0].Identity.Login != scmtest.DefaultUser {
		t.Fatalf("check = %+v", res)
	}
	if res[0].Repos[0].Err != nil || !errors.Is(res[0].Repos[1].Err, scm.ErrNotFound) || !strings.Contains(res[0].Repos[1].Err.Error(), "acme/missing") {
		t.Errorf("repo checks = %+v", res[0].Repos)
	}

	bad, err := connector.Parse([]byte(cfg), "connectors.yaml", lookup("not-a-valid-token"))
	if err != nil {
		t.Fatal(err)
	}
	res = bad.Check(context.Background(), nil)
	if len(res) != 1 || !errors.Is(res[0].Err, scm.ErrUnauthorized) || strings.Contains(res[0].Err.Error(), "not-a-valid-token") {
		t.Fatalf("check with a bad token = %+v", res)
	}
}
