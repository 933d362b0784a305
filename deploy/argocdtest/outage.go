package argocdtest

import (
	"context"
	"strings"
	"time"
)

// Outages, as a real Argo CD has them: a revoked token, a server that stops answering, a
// restart. Tests use them to check that prflow never decides on what it can no longer see.

// RevokeToken makes the server refuse tok from now on, as when the API token is deleted from
// the account: every request with it gets 401, and every watch stream opened with it ends
// with the same error.
func (s *Server) RevokeToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoked == nil {
		s.revoked = map[string]bool{}
	}
	s.revoked[tok] = true
	for sub := range s.subs {
		if sub.token == tok {
			sub.revokeOnce.Do(func() { close(sub.revoke) })
		}
	}
}

// RestoreToken accepts a revoked token again (as if it had been re-issued to the agent).
func (s *Server) RestoreToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.revoked, tok)
}

// revokedErr is the real server's answer to a deleted API token.
func (s *Server) revokedErr(tok string) *apiError {
	id := "unknown"
	if parts := strings.Split(tok, "."); len(parts) == 3 {
		if pb, err := b64.DecodeString(parts[1]); err == nil {
			if i := strings.Index(string(pb), `"jti":"`); i >= 0 {
				rest := string(pb)[i+7:]
				if j := strings.IndexByte(rest, '"'); j >= 0 {
					id = rest[:j]
				}
			}
		}
	}
	return errf(codeUnauthenticated, "invalid session: account admin does not have token with id %s", id)
}

// SetDown takes the server down (true: every connection is cut before an answer and open
// streams are dropped, as while argocd-server restarts) or brings it back (false). The
// application controller keeps running, as it does in a real restart of the API server.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
	if down {
		s.DropStreams()
	}
}

// Restart takes the server down for d, then brings it back; it returns at once.
func (s *Server) Restart(d time.Duration) {
	s.SetDown(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goBackground(func() {
		if s.sleep(d) {
			s.SetDown(false)
		}
	})
}

func (s *Server) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// SetUnresponsive makes the server stop answering (true): requests hang, open streams send
// nothing (no events, no keepalives), as with a hung server or a black-holed network. false
// answers again; what was held is then sent.
func (s *Server) SetUnresponsive(hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case hang && s.hang == nil:
		s.hang = make(chan struct{})
	case !hang && s.hang != nil:
		close(s.hang)
		s.hang = nil
	}
}

// waitAnswering blocks while the server is unresponsive; false when ctx or the server ended.
func (s *Server) waitAnswering(ctx context.Context) bool {
	s.mu.Lock()
	h := s.hang
	s.mu.Unlock()
	if h == nil {
		return true
	}
	select {
	case <-h:
		return true
	case <-ctx.Done():
		return false
	case <-s.ctx.Done():
		return false
	}
}
