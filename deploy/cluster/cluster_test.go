package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/chaos"
	"github.com/prflow/prflow/pipelines/controller/ctltest"
	"github.com/prflow/prflow/queue"
)

// clusterStack is the stack every cluster test runs: the topology at R3, two controller
// replicas on nodes 1 and 2, three workers on nodes 1, 2 and 3, the agent on node 3.
func clusterStack(t *testing.T) *stack {
	c := Start(t, 3, nil, nil)
	s := newStack(t, c, nil)
	s.setup(0)
	s.controller(0)
	s.controller(1)
	for i := range 3 {
		s.worker(i, "w"+string(rune('1'+i)))
	}
	s.agent(2)
	return s
}

// midRun waits until at least one of the runs has a step that succeeded, so a kill lands
// while runs are under way.
func (s *stack) midRun(specs []chaos.RunSpec) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, sp := range specs {
			r, err := s.ctls[0].v.Get(context.Background(), sp.ID)
			if err != nil {
				continue
			}
			for _, st := range r.Stages {
				for _, x := range st.Steps {
					if x.Status == pipelines.StSucceeded {
						return
					}
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatal("no run made progress in 60s")
}

// killLeaderMidRun kills the node leading stream mid-run, restarts it on its store after a
// pause, and checks every run completes with nothing lost or doubled.
func killLeaderMidRun(t *testing.T, prefix, stream string) {
	s := clusterStack(t)
	sp := specs(prefix, 6)
	s.start(sp)
	s.midRun(sp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := s.open("server", 0, "probe")
	defer probe.Close()
	leader, err := s.c.StreamLeader(ctx, probe.JS, stream)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killing %s, leader of %s", leader.Name, stream)
	s.c.Kill(leader)
	time.Sleep(2 * time.Second)
	s.c.Restart(leader)
	t.Logf("%s restarted on its store", leader.Name)
	res := s.wait(s.ctls[0].v, sp, 150*time.Second)
	s.check(sp, res)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := s.c.WaitCurrent(ctx2, probe.JS, stream, 20*time.Second); err != nil {
		t.Errorf("after the restart: %v", err)
	}
}

// TestClusterJobsLeaderKilled: the node leading PRFLOW_JOBS dies mid-run and comes back on its
// store; every run completes, one PR and one merge each.
func TestClusterJobsLeaderKilled(t *testing.T) {
	killLeaderMidRun(t, "jobs", queue.StreamJobs)
}

// TestClusterRunsLeaderKilled: the same for the leader of the runs bucket.
func TestClusterRunsLeaderKilled(t *testing.T) {
	killLeaderMidRun(t, "kv", "KV_"+queue.BucketRuns)
}

// TestClusterControllerKilled: two controller replicas; one is stopped mid-run (its
// connection closed without draining, as a crashed pod's), the other finishes every run.
func TestClusterControllerKilled(t *testing.T) {
	s := clusterStack(t)
	sp := specs("ctl", 6)
	s.start(sp)
	s.midRun(sp)
	victim := s.ctls[0]
	victim.conn.NC.Close()
	victim.cancel()
	<-victim.done
	t.Log("controller-0 killed")
	res := s.wait(s.ctls[1].v, sp, 150*time.Second)
	s.check(sp, res)
}

// TestClusterTwoReplicasManyRuns: many short runs through two controller replicas on the
// cluster, each started and waited for on alternating replicas. Before the runs bucket was
// read from its leader, a replica could read a run the other had just created as missing and
// drop its first result: a few runs in a hundred stayed queued for ever. 40 runs (100 with
// PRFLOW_TEST_LONG=1, `task test-long`: a hundred took 74 s of a 2-core machine at load 20).
func TestClusterTwoReplicasManyRuns(t *testing.T) {
	c := Start(t, 3, nil, nil)
	s := newStack(t, c, nil)
	s.setup(0)
	s.controller(0)
	s.controller(1)
	s.worker(1, "w1")
	s.worker(2, "w2")
	runNoops(t, s, ctltest.Pick(40, 100), 5)
}

// TestClusterReadAfterWrite: the buckets whose reads decide things have direct gets off (so
// reads go to the stream leader), and a key written through one node is read back at once
// through the others, every time.
func TestClusterReadAfterWrite(t *testing.T) {
	c := Start(t, 3, nil, nil)
	s := newStack(t, c, nil)
	s.setup(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var conns []*queue.Conn
	for i := range 3 {
		conn := s.open("server", i, fmt.Sprintf("raw-%d", i))
		defer conn.Close()
		conns = append(conns, conn)
	}
	for _, name := range queue.LeaderReadBuckets {
		st, err := conns[0].JS.Stream(ctx, "KV_"+name)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().Config.AllowDirect {
			t.Errorf("bucket %s: direct gets on (reads may come from a lagging follower)", name)
		}
	}
	var kvs []jetstream.KeyValue
	for _, conn := range conns {
		kv, err := conn.JS.KeyValue(ctx, queue.BucketRuns)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv)
	}
	missed := 0
	for i := range 300 {
		key := fmt.Sprintf("raw-%d", i)
		if _, err := kvs[i%3].Create(ctx, key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := kvs[(i+1)%3].Get(ctx, key); err != nil {
			missed++
		}
	}
	if missed > 0 {
		t.Fatalf("%d of 300 keys not found right after they were created", missed)
	}
}
