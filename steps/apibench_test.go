package steps

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prflow/prflow/scm"
	"github.com/prflow/prflow/scm/github"
	"github.com/prflow/prflow/scm/scmtest"
)

type oneSCM struct{ p scm.Provider }

func (o oneSCM) Provider(context.Context, string) (scm.Provider, error) { return o.p, nil }

// BenchmarkUpdateReleaseRepoAPIPath runs UpdateReleaseRepo (one key in 3 files, commit, open
// PR) through GitHub's API against a small release repo (10 files) and a large one (20,000
// files, 2,000 commits). The API path never clones, so its cost should not grow with the repo.
func BenchmarkUpdateReleaseRepoAPIPath(b *testing.B) {
	for _, size := range []struct {
		name           string
		files, commits int
	}{{"small", 10, 10}, {"large", 20000, 2000}} {
		b.Run(size.name, func(b *testing.B) {
			gh := scmtest.NewGitHub(b)
			if err := gh.Git().GenerateRepo("acme", "release", size.files, size.commits); err != nil {
				b.Fatal(err)
			}
			p, err := github.New(github.WithBaseURL(gh.APIURL()), github.WithToken(scmtest.DefaultToken))
			if err != nil {
				b.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			gh.ResetCalls()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				var targets []any
				for f := 0; f < 3; f++ {
					targets = append(targets, map[string]any{"filePath": fmt.Sprintf("apps/app-%05d/config.yaml", f*3),
						"variables": []any{map[string]any{"name": "image.tag", "value": fmt.Sprintf("bench-%d", i)}}})
				}
				sc := &Context{RunID: fmt.Sprintf("r%d", i), Pipeline: "bench", Stage: "s", StepID: "u", Log: log,
					Inputs:   map[string]any{"connector": "gh", "repo": "acme/release", "targets": targets},
					Services: NewServices(map[string]any{ServiceSCM: oneSCM{p}})}
				res, err := runUpdateReleaseRepo(context.Background(), sc)
				if err != nil || res.Status != Succeeded {
					b.Fatalf("%v %+v", err, res)
				}
			}
			b.ReportMetric(time.Since(start).Seconds()*1000/float64(b.N), "ms/write")
			b.ReportMetric(float64(len(gh.Calls()))/float64(b.N), "api-calls/write")
		})
	}
}
