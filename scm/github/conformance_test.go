package github

import (
	"testing"
	"time"

	"github.com/prflow/prflow/scm/scmconformance"
	"github.com/prflow/prflow/scm/scmtest"
	"github.com/prflow/prflow/scm/transport"
)

func TestConformance(t *testing.T) {
	scmconformance.Run(t, func(t *testing.T) scmconformance.Env {
		g := scmtest.NewGitHub(t)
		hc, err := transport.NewClient(transport.WithProvider(Name, "conformance"), transport.WithSecrets(scmtest.DefaultToken),
			transport.WithBackoff(time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		d, err := New(WithBaseURL(g.APIURL()), WithToken(scmtest.DefaultToken), WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		env := scmconformance.ForgeEnv(t, g.Forge, d)
		env.Settle = scmconformance.SettleMergeability(d, testRepo, "PR #")
		env.FailEdits = func(t *testing.T) {
			if err := g.InjectFault(scmtest.Fault{Method: "PATCH", PathPattern: `/issues/comments/\d+$`, Status: 422,
				Body: `{"message":"Validation Failed","errors":[{"resource":"IssueComment","code":"custom","message":"body could not be saved"}]}`}); err != nil {
				t.Fatal(err)
			}
		}
		return env
	})
}
