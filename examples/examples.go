// Package examples holds the example pipelines and release repo used by `prflow dev`, the
// docs and the tests. They are embedded so `prflow dev` works from any directory.
package examples

import (
	"embed"
	"io/fs"
	"strings"
)

//go:embed pipelines/*.yaml all:release-repo
var FS embed.FS

// DefaultPipelineName is the pipeline `prflow dev` runs without --pipeline.
const DefaultPipelineName = "pipelines/promote.yaml"

// ReleaseRepo returns the sample release repo's files (path → content) that `prflow dev`
// seeds its local git server with.
func ReleaseRepo() map[string]string {
	out := map[string]string{}
	_ = fs.WalkDir(FS, "release-repo", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := FS.ReadFile(p)
		out[strings.TrimPrefix(p, "release-repo/")] = string(b)
		return nil
	})
	return out
}

// DefaultPipeline returns the default example's source.
func DefaultPipeline() []byte {
	b, err := FS.ReadFile(DefaultPipelineName)
	if err != nil {
		panic(err) // embedded at build time; missing means a broken build
	}
	return b
}
