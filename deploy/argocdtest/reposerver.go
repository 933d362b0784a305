package argocdtest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
)

// The repo-server is the part of Argo CD that reads git and renders manifests; the API server,
// the application controller and the ApplicationSet controller call it over gRPC. While it is
// down (SetRepoServerDown) each of them fails the way v3.2.11 does, with gRPC code Unavailable
// inside its own error:
//
//   - POST …/sync: HTTP 400 (FailedPrecondition) "error resolving repo revision: rpc error:
//     code = Unavailable desc = connection error: … connection refused";
//   - the application controller: a ComparisonError condition carrying the same text, sync
//     status Unknown;
//   - the ApplicationSet controller: an ErrorOccurred condition, and the refresh annotation
//     stays (a failed generation returns before the controller removes it), so a caller
//     waiting for the annotation to go waits in vain until the repo-server is back and the
//     set is generated again.

// repoServerDown is the text a gRPC client of a stopped repo-server gets.
const repoServerDown = `rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:8081: connect: connection refused"`

// errRepoServerDown is what every repo-server call fails with while it is down.
var errRepoServerDown = errors.New(repoServerDown)

// SetRepoServerDown stops (true) or restarts (false) the repo-server. The API server and the
// controllers keep running. A restart regenerates every ApplicationSet, as the controller's
// requeue after a failed generation eventually does.
func (s *Server) SetRepoServerDown(down bool) {
	was := s.repoDown.Swap(down)
	if was && !down {
		s.mu.Lock()
		for k := range s.appsets {
			s.queueRegenerate(k)
		}
		s.mu.Unlock()
	}
}

// RepoServerDown reports whether the repo-server is stopped.
func (s *Server) RepoServerDown() bool { return s.repoDown.Load() }

// repoServer is the GitReader behind the fake's repo-server: it fails while the repo-server is
// down.
type repoServer struct {
	GitReader
	down *atomic.Bool
}

func (r repoServer) Resolve(ctx context.Context, repoURL, revision string) (string, error) {
	if r.down.Load() {
		return "", errRepoServerDown
	}
	return r.GitReader.Resolve(ctx, repoURL, revision)
}

func (r repoServer) ReadTree(ctx context.Context, repoURL, sha, dir string) (map[string][]byte, error) {
	if r.down.Load() {
		return nil, errRepoServerDown
	}
	return r.GitReader.ReadTree(ctx, repoURL, sha, dir)
}

// isRepoServerDown reports whether err (or its text) is the repo-server being down.
func isRepoServerDown(err error) bool {
	return err != nil && (errors.Is(err, errRepoServerDown) || strings.Contains(err.Error(), repoServerDown))
}
