package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/steps"
	"github.com/prflow/prflow/steps/envelope"
)

// confPath is the permissions file shipped for operators; the tests run on exactly it.
const confPath = "../nats/permissions.conf"

// Role is one role's NATS permissions as the table below states them.
type Role struct {
	PubAllow, SubAllow []string
	AllowResponses     bool
}

// Roles is the table permissions.conf must match (TestPermissionsTableMatchesConf): the
// reviewable statement of what each role may do. Change both together.
var Roles = map[string]Role{
	"prflow-server": {
		PubAllow:       []string{"$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "prflow.>"},
		SubAllow:       []string{"_INBOX_server.>", "prflow.results.*"},
		AllowResponses: true,
	},
	"prflow-worker": {
		PubAllow: []string{
			"$JS.API.STREAM.INFO.*",
			"$JS.API.CONSUMER.CREATE.PRFLOW_JOBS.>", "$JS.API.CONSUMER.INFO.PRFLOW_JOBS.>",
			"$JS.API.CONSUMER.MSG.NEXT.PRFLOW_JOBS.>", "$JS.ACK.PRFLOW_JOBS.>",
			"$JS.API.DIRECT.GET.KV_prflow-meta.$KV.prflow-meta.schema", "$JS.API.DIRECT.GET.KV_prflow-apps", "$JS.API.DIRECT.GET.KV_prflow-apps.>",
			"$JS.API.DIRECT.GET.KV_prflow-agents", "$JS.API.DIRECT.GET.KV_prflow-agents.>", "$JS.API.STREAM.MSG.GET.KV_prflow-locks",
			"$JS.API.STREAM.MSG.GET.KV_prflow-mergeq", "$JS.API.DIRECT.GET.KV_prflow-workers.>",
			"$JS.API.DIRECT.GET.KV_prflow-notify.>",
			"$JS.API.CONSUMER.CREATE.KV_prflow-mergeq.>", "$JS.API.CONSUMER.DELETE.KV_prflow-mergeq.>",
			"$JS.API.CONSUMER.CREATE.KV_prflow-apps.>", "$JS.API.CONSUMER.DELETE.KV_prflow-apps.>",
			"$JS.API.CONSUMER.CREATE.KV_prflow-agents.>", "$JS.API.CONSUMER.DELETE.KV_prflow-agents.>",
			"$JS.FC.>",
			"$KV.prflow-locks.>", "$KV.prflow-mergeq.>", "$KV.prflow-workers.>", "$KV.prflow-notify.>",
			"prflow.results.*", "prflow.events.*.result", "prflow.logs.>", "prflow.agent.>",
			"prflow.control.exec.*",
		},
		SubAllow:       []string{"_INBOX_worker.>", "prflow.control.cancel", "prflow.control.exec.*"},
		AllowResponses: true,
	},
	"prflow-agent": {
		PubAllow: []string{
			"$JS.API.STREAM.INFO.*",
			"$JS.API.DIRECT.GET.KV_prflow-meta.$KV.prflow-meta.schema", "$JS.API.DIRECT.GET.KV_prflow-apps", "$JS.API.DIRECT.GET.KV_prflow-apps.>",
			"$JS.API.DIRECT.GET.KV_prflow-agents", "$JS.API.DIRECT.GET.KV_prflow-agents.>", "$JS.API.STREAM.MSG.GET.KV_prflow-locks",
			"$JS.API.CONSUMER.CREATE.KV_prflow-apps.>", "$JS.API.CONSUMER.DELETE.KV_prflow-apps.>",
			"$JS.FC.>",
			"$KV.prflow-apps.>", "$KV.prflow-agents.>", "$KV.prflow-locks.>",
		},
		SubAllow:       []string{"_INBOX_agent.>", "prflow.agent.>"},
		AllowResponses: true,
	},
}

// passwords are this test process's role passwords (the conf reads them from the env).
type passwords map[string]string

func newPasswords(t *testing.T) passwords {
	p := passwords{}
	for role, env := range map[string]string{"server": "PRFLOW_NATS_SERVER_PASSWORD", "worker": "PRFLOW_NATS_WORKER_PASSWORD", "agent": "PRFLOW_NATS_AGENT_PASSWORD"} {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		p[role] = hex.EncodeToString(b)
		t.Setenv(env, p[role])
	}
	return p
}

func (p passwords) creds(role string) (string, string) { return "prflow-" + role, p[role] }

// withConf makes every node load permissions.conf's accounts and users (parsed per node: the
// parsed accounts belong to one server).
func withConf(t testing.TB) func(*server.Options) {
	return func(o *server.Options) {
		conf, err := server.ProcessConfigFile(confPath)
		if err != nil {
			t.Fatalf("%s: %v", confPath, err)
		}
		o.Accounts, o.Users = conf.Accounts, conf.Users
	}
}

// violations collects the servers' "Publish/Subscription Violation" log lines.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) record(format string, a ...any) {
	l := fmt.Sprintf(format, a...)
	if strings.Contains(l, "Violation - Subject") {
		v.mu.Lock()
		v.lines = append(v.lines, l)
		v.mu.Unlock()
	}
}
func (v *violations) Noticef(f string, a ...any) { v.record(f, a...) }
func (v *violations) Warnf(f string, a ...any)   { v.record(f, a...) }
func (v *violations) Fatalf(f string, a ...any)  { v.record(f, a...) }
func (v *violations) Errorf(f string, a ...any)  { v.record(f, a...) }
func (v *violations) Debugf(f string, a ...any)  { v.record(f, a...) }
func (v *violations) Tracef(f string, a ...any)  {}
func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.lines)
}

// TestPermissionsTableMatchesConf: permissions.conf grants each role exactly what Roles says.
func TestPermissionsTableMatchesConf(t *testing.T) {
	newPasswords(t)
	conf, err := server.ProcessConfigFile(confPath)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, u := range conf.Users {
		want, ok := Roles[u.Username]
		if !ok {
			t.Errorf("%s: user %s is not in the Roles table", confPath, u.Username)
			continue
		}
		seen[u.Username] = true
		if u.Account == nil || u.Account.Name != "PRFLOW" {
			t.Errorf("%s: user %s is not in account PRFLOW", confPath, u.Username)
		}
		if u.Password == "" || strings.HasPrefix(u.Password, "$") {
			t.Errorf("%s: user %s: password not taken from the environment", confPath, u.Username)
		}
		p := u.Permissions
		if p == nil || p.Publish == nil || p.Subscribe == nil {
			t.Errorf("%s: user %s has no publish/subscribe permissions", confPath, u.Username)
			continue
		}
		if !slices.Equal(p.Publish.Allow, want.PubAllow) {
			t.Errorf("%s: %s publish allow\n got  %q\n want %q", confPath, u.Username, p.Publish.Allow, want.PubAllow)
		}
		if !slices.Equal(p.Subscribe.Allow, want.SubAllow) {
			t.Errorf("%s: %s subscribe allow\n got  %q\n want %q", confPath, u.Username, p.Subscribe.Allow, want.SubAllow)
		}
		if (p.Response != nil) != want.AllowResponses {
			t.Errorf("%s: %s allow_responses = %v, want %v", confPath, u.Username, p.Response != nil, want.AllowResponses)
		}
	}
	for name := range Roles {
		if !seen[name] {
			t.Errorf("%s: no user %s", confPath, name)
		}
	}
}

// permStack is a cluster running permissions.conf, with prflow on it as the restricted users.
func permStack(t *testing.T) (*stack, *violations, passwords) {
	pw := newPasswords(t)
	v := &violations{}
	c := Start(t, 3, withConf(t), v)
	s := newStack(t, c, pw.creds)
	s.setup(0)
	s.controller(0)
	s.worker(1, "w1")
	s.worker(2, "w2")
	s.agent(2)
	return s, v, pw
}

// TestPermissionsPromotion runs promotions with the least-privilege users: every run succeeds
// with one PR and one merge, and the servers logged no permission violation (a permission
// the conf lacks fails here).
func TestPermissionsPromotion(t *testing.T) {
	s, v, _ := permStack(t)
	sp := specs("perm", 3)
	s.start(sp)
	res := s.wait(s.ctls[0].v, sp, 120*time.Second)
	s.check(sp, res)
	if l := v.list(); len(l) > 0 {
		t.Fatalf("%d permission violations with %s's users:\n%s", len(l), confPath, strings.Join(l, "\n"))
	}
}

// TestPermissionsWorkerCannotReadRuns: with a worker's credentials, the runs bucket cannot be
// read (get, watch, raw stream read, its subjects), the server's replies cannot be overheard,
// and no event but a step result can be published (an approval, a cancel).
func TestPermissionsWorkerCannotReadRuns(t *testing.T) {
	s, v, pw := permStack(t)
	sp := specs("secret", 1)
	s.start(sp)
	if res := s.wait(s.ctls[0].v, sp, 120*time.Second); res[sp[0].ID].Status != string(pipelines.StSucceeded) {
		t.Fatalf("run: %+v", res)
	}
	errs := make(chan error, 64)
	user, pass := pw.creds("worker")
	nc, err := s.c.Connect(1, nats.UserInfo(user, pass), nats.CustomInboxPrefix(queue.RoleInbox("worker")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	denied := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed with a worker's credentials", what)
		}
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	kv, err := js.KeyValue(ctx, queue.BucketRuns) // stream info (metadata) is allowed
	if err != nil {
		t.Fatalf("open runs bucket handle: %v", err)
	}
	c1, x1 := short()
	_, err = kv.Get(c1, sp[0].ID)
	x1()
	denied("get a run", err)
	c2, x2 := short()
	w, err := kv.WatchAll(c2)
	if err == nil {
		select {
		case e := <-w.Updates():
			if e != nil {
				err = nil
				t.Errorf("watch runs: got %s", e.Key())
			}
		case <-c2.Done():
			err = c2.Err()
		}
		_ = w.Stop()
	}
	x2()
	denied("watch runs", err)
	c3, x3 := short()
	str, err := js.Stream(c3, "KV_"+queue.BucketRuns)
	if err == nil {
		_, err = str.GetLastMsgForSubject(c3, "$KV."+queue.BucketRuns+"."+sp[0].ID)
	}
	x3()
	denied("read the runs stream", err)
	for _, subj := range []string{"$KV." + queue.BucketRuns + ".>", "_INBOX_server.>", "_INBOX.>", "prflow.events.>", "$JS.ACK.>"} {
		sub, err := nc.SubscribeSync(subj)
		if err == nil {
			err = nc.Flush()
		}
		if err == nil {
			// The violation arrives asynchronously.
			select {
			case e := <-errs:
				err = e
			case <-time.After(2 * time.Second):
			}
		}
		_ = sub.Unsubscribe()
		if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("subscribe %s: %v, want a permissions violation", subj, err)
		}
	}
	for _, subj := range []string{queue.EventSubject(sp[0].ID, queue.EvSignal), queue.EventSubject(sp[0].ID, queue.EvCancel), "$KV." + queue.BucketRuns + ".x"} {
		c4, x4 := short()
		_, err := js.Publish(c4, subj, []byte(`{}`))
		x4()
		denied("publish "+subj, err)
	}
	if n := len(v.list()); n == 0 {
		t.Fatal("the servers logged no permission violation for the denied operations")
	}
}

// TestPermissionsWorkerCannotForgeResult: a worker's credentials may publish results, but a
// result for a job it was not given (here: a queued job no worker took) is refused, offered
// directly or through the events stream, because it cannot know the job's token. The same
// result with the job's token is applied, so the refusal is the token's doing.
func TestPermissionsWorkerCannotForgeResult(t *testing.T) {
	pw := newPasswords(t)
	v := &violations{}
	c := Start(t, 3, withConf(t), v)
	s := newStack(t, c, pw.creds)
	s.setup(0)
	// No worker: the run's job stays queued. Start checks would refuse a run no worker serves.
	ctl := s.controller(0, controller.WithoutStartChecks()).v
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := ctl.Start(ctx, controller.StartRequest{ID: "victim", File: "v.yaml", Executor: "tester",
		Source: []byte("name: v\nstages:\n  - id: s\n    steps:\n      - {id: x, type: Noop}\n")})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Stages[0].Steps[0]
	if st.Status != pipelines.StQueued {
		t.Fatalf("step is %s, want queued", st.Status)
	}
	forged := func(token string) []byte {
		ev := envelope.Event{V: envelope.Version, Kind: queue.EvResult, Run: r.ID, Stage: "s", Step: "x", Attempt: st.Attempt, Wake: st.Wake,
			Result: &steps.Result{Status: steps.Succeeded, Outputs: map[string]any{"forged": true}}, Worker: "mallory", Token: token}
		b, _ := json.Marshal(ev)
		return b
	}
	user, pass := pw.creds("worker")
	nc, err := c.Connect(1, nats.UserInfo(user, pass), nats.CustomInboxPrefix(queue.RoleInbox("worker")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for _, tok := range []string{"", "0123456789abcdef0123456789abcdef", queue.JobToken([]byte("a guessed key, not the controllers'"), "victim/s/x/1/0")} {
		reply, err := nc.RequestWithContext(ctx, queue.ResultSubject(r.ID), forged(tok))
		if err != nil {
			t.Fatalf("direct result: %v", err)
		}
		if !strings.Contains(string(reply.Data), "bad result") || !strings.Contains(string(reply.Data), "token") {
			t.Fatalf("forged direct result (token %q) answered %q", tok, reply.Data)
		}
		if _, err := js.Publish(ctx, queue.EventSubject(r.ID, queue.EvResult), forged(tok)); err != nil {
			t.Fatalf("a worker may publish result events: %v", err)
		}
	}
	// A worker's user cannot read the key the tokens are made with.
	kctx, kcancel := context.WithTimeout(ctx, 2*time.Second)
	if _, err := queue.LoadResultKey(kctx, js); err == nil {
		t.Fatal("a worker read the result key")
	}
	kcancel()
	time.Sleep(2 * time.Second) // the stream copies reach the controller and are dropped
	cur, err := ctl.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := cur.Stages[0].Steps[0]; got.Status != pipelines.StQueued || cur.Status.Terminal() {
		t.Fatalf("a forged result was applied: step %s, run %s, outputs %v", got.Status, cur.Status, got.Outputs)
	}
	// Control: with the job's token (read here with the server's credentials) it is applied.
	key, err := queue.LoadResultKey(ctx, s.ctls[0].conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := nc.RequestWithContext(ctx, queue.ResultSubject(r.ID), forged(queue.JobToken(key, "victim/s/x/"+fmt.Sprint(st.Attempt)+"/"+fmt.Sprint(st.Wake))))
	if err != nil || strings.Contains(string(reply.Data), "bad result") {
		t.Fatalf("result with the job's token: %q, %v", reply.Data, err)
	}
	if fin, err := ctl.Wait(ctx, r.ID, nil); err != nil || fin.Status != pipelines.StSucceeded {
		t.Fatalf("run after the genuine result: %v, %v", fin, err)
	}
}
