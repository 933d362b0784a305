package queue

import "testing"

// Job subjects route by the first connector a job names; the pool and connector read back
// from the subject (the queue-depth metric) for names with dots, spaces and underscores too.
func TestJobSubjects(t *testing.T) {
	for _, tc := range []struct {
		pool       string
		connectors []string
		subject    string
	}{
		{"default", nil, "prflow.jobs.default"},
		{"default", []string{""}, "prflow.jobs.default"},
		{"default", []string{"release"}, "prflow.jobs.default.c.release"},
		{"gpu", []string{"gh.acme", "other"}, "prflow.jobs.gpu.c.gh_2eacme"},
		{"p", []string{"a_b c>*"}, "prflow.jobs.p.c.a_5fb_20c_3e_2a"},
	} {
		got := JobSubjectOf(tc.pool, tc.connectors)
		if got != tc.subject {
			t.Errorf("%s %v: subject %q, want %q", tc.pool, tc.connectors, got, tc.subject)
		}
		pool, conn, ok := ParseJobSubject(got)
		want := ""
		if len(tc.connectors) > 0 {
			want = tc.connectors[0]
		}
		if !ok || pool != tc.pool || conn != want {
			t.Errorf("parse %q: %q %q %v, want %q %q", got, pool, conn, ok, tc.pool, want)
		}
		if len(tc.connectors) > 0 && tc.connectors[0] != "" {
			if name := ConnectorConsumerName(tc.pool, tc.connectors[0]); name != "pool-"+tc.pool+"-c-"+Token(tc.connectors[0]) {
				t.Errorf("consumer name %q", name)
			}
		}
	}
	for _, bad := range []string{"prflow.events.x", "prflow.jobs.", "other"} {
		if _, _, ok := ParseJobSubject(bad); ok {
			t.Errorf("%q parsed as a job subject", bad)
		}
	}
}
