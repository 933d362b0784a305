package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream, bucket and subject names. Every component uses these; nothing else names NATS objects.
const (
	StreamJobs   = "PRFLOW_JOBS"
	StreamEvents = "PRFLOW_EVENTS"
	StreamLogs   = "PRFLOW_LOGS"
	StreamSCM    = "PRFLOW_SCM"
	StreamDLQ    = "PRFLOW_DLQ"

	BucketRuns    = "prflow-runs"
	BucketSpecs   = "prflow-specs" // pipeline sources by content hash; runs point at them
	BucketApps    = "prflow-apps"
	BucketLocks   = "prflow-locks"
	BucketWorkers = "prflow-workers"
	BucketAgents  = "prflow-agents"

	ControllerConsumer = "controller"
	DLQConsumer        = "controller-dlq"
)

// LeaseTTL is how long a lease or a worker/agent registration lives without renewal.
const LeaseTTL = 30 * time.Second

// DedupWindow is how long JetStream remembers a Nats-Msg-Id. It bounds how late a crashed
// controller or worker can republish the same job or result without it being done twice.
const DedupWindow = 30 * time.Minute

// JobSubject is the subject a pool's jobs that name no connector are published on.
func JobSubject(pool string) string { return "prflow.jobs." + pool }

// ConnectorJobSubject is the subject of a pool's jobs that need connector: only workers that
// hold it consume it (ConnectorConsumer), so a worker never takes a job it cannot run.
func ConnectorJobSubject(pool, connector string) string {
	return "prflow.jobs." + pool + ".c." + Token(connector)
}

// JobSubjectOf is where a job of pool that names connectors goes: routed by the first
// connector (a step names one; the worker resolves any other itself), else to its pool.
func JobSubjectOf(pool string, connectors []string) string {
	if len(connectors) > 0 && connectors[0] != "" {
		return ConnectorJobSubject(pool, connectors[0])
	}
	return JobSubject(pool)
}

// ParseJobSubject splits a job subject into its pool and connector token ("" for none).
func ParseJobSubject(subject string) (pool, connector string, ok bool) {
	rest, ok := strings.CutPrefix(subject, "prflow.jobs.")
	if !ok || rest == "" {
		return "", "", false
	}
	pool, conn, hasConn := strings.Cut(rest, ".c.")
	if hasConn {
		conn = Untoken(conn)
	}
	return pool, conn, pool != "" && !strings.Contains(pool, ".")
}

// Token escapes s into one NATS subject token or consumer name part: ASCII letters, digits and
// '-' stay, every other byte becomes "_" plus two hex digits, so two names never share one.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// Untoken reverses Token.
func Untoken(t string) string {
	if t == "_" {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] == '_' && i+2 < len(t) {
			if n, err := strconv.ParseUint(t[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(t[i])
	}
	return b.String()
}

// Event kinds on prflow.events.<run>.<kind>.
const (
	EvStart  = "start"  // advance a run (Start no longer sends it; still applied if found)
	EvResult = "result" // a step finished, failed or parked
	EvWake   = "wake"   // wake a parked step
	EvSignal = "signal" // approval or forge event for a step
	EvCancel = "cancel"
	EvTick   = "tick" // timers due: retries, stage timeouts, poll fallbacks, deadlines
	EvDead   = "dead" // a job exhausted its deliveries
)

// EventSubject is the subject of one kind of event for a run.
func EventSubject(run, kind string) string { return "prflow.events." + run + "." + kind }

// ResultSubject is the core-NATS request subject a worker offers a step's result on first.
// A controller replica (queue group ResultGroup) applies it to the run state, then acks the
// job (see ResultAckHeader) or replies ResultOK; only then is the job acked. Without either
// (no controller, timeout, error) the worker publishes the result to the events stream
// instead, so a result is never only in flight.
func ResultSubject(run string) string { return "prflow.results." + run }

// ResultGroup is the queue group controllers answer result requests in.
const ResultGroup = "prflow-controllers"

// ResultOK is a controller's reply once a result is in the run state.
const ResultOK = "ok"

// ResultAckHeader carries the job's ack subject on a direct result. A controller that applied
// the result acks the job itself, with the worker's reply inbox as the ack's reply subject:
// the server's confirmation (an empty message) is then the worker's answer. One message per
// step fewer than answering ResultOK and leaving the ack to the worker.
const ResultAckHeader = "Prflow-Job-Ack"

// JobAckPrefix starts the ack subject of every job; a controller acks nothing else.
const JobAckPrefix = "$JS.ACK." + StreamJobs + "."

// LogSubject is where a step's log lines go.
func LogSubject(run, stage, step string) string {
	return "prflow.logs." + run + "." + stage + "." + step
}

// SCMSubject is where normalised webhook events go.
func SCMSubject(provider, kind string) string { return "prflow.scm." + provider + "." + kind }

// CancelSubject is a core-NATS subject workers listen on to stop a cancelled run's jobs.
const CancelSubject = "prflow.control.cancel"

// Setup creates or upgrades every stream and bucket. It is idempotent and safe to call from
// every process at start. replicas is 1 for the embedded server, 3 for a production cluster.
//
// A topology at SchemaVersion with the same replicas is left as it is (one KV read), so every
// server start does not rewrite it; a newer one is refused with ErrSchemaNewer before anything
// is touched.
func Setup(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas <= 0 {
		replicas = 1
	}
	cur, err := ReadSchema(ctx, js)
	if err != nil {
		return err
	}
	if err := checkSchema(cur); err != nil {
		return err
	}
	if cur != nil && cur.Version == SchemaVersion && cur.Replicas == replicas {
		return nil
	}
	streams := []jetstream.StreamConfig{
		{Name: StreamJobs, Subjects: []string{"prflow.jobs.>"}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: DedupWindow, Description: "step jobs, one subject per worker pool"},
		{Name: StreamEvents, Subjects: []string{"prflow.events.>"}, Retention: jetstream.WorkQueuePolicy,
			Duplicates: DedupWindow, Description: "run events: starts, step results, wakes, signals"},
		{Name: StreamLogs, Subjects: []string{"prflow.logs.>"}, Retention: jetstream.LimitsPolicy,
			MaxAge: 7 * 24 * time.Hour, MaxBytes: 1 << 30, Description: "step log lines, secrets masked"},
		{Name: StreamSCM, Subjects: []string{"prflow.scm.>"}, Retention: jetstream.LimitsPolicy,
			MaxAge: 7 * 24 * time.Hour, Duplicates: WebhookDedupWindow, Description: "normalised forge webhooks"},
		{Name: StreamDLQ, Subjects: []string{
			"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamJobs + ".>",
			"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + StreamJobs + ".>",
		}, Retention: jetstream.WorkQueuePolicy, Description: "dead-letter advisories of step jobs"},
	}
	for _, sc := range streams {
		sc.Storage = jetstream.FileStorage
		sc.Replicas = replicas
		if err := untilPlaced(ctx, func(ctx context.Context) error { _, err := js.CreateOrUpdateStream(ctx, sc); return err }); err != nil {
			return fmt.Errorf("create stream %s: %w", sc.Name, err)
		}
	}
	buckets := []jetstream.KeyValueConfig{
		{Bucket: BucketRuns, History: 1, Description: "run state, one key per run"},
		{Bucket: BucketSpecs, History: 1, Description: "pipeline sources by content hash"},
		{Bucket: BucketApps, History: 1, Description: "GitOps app status written by agents"},
		{Bucket: BucketLocks, History: 1, TTL: LeaseTTL, Description: "repo+branch leases"},
		{Bucket: BucketWorkers, History: 1, TTL: LeaseTTL, Description: "live workers"},
		{Bucket: BucketAgents, History: 1, TTL: LeaseTTL, Description: "live GitOps agents"},
		mergeQueueBucketConfig(replicas),
		notifyBucketConfig(replicas),
		idempotencyBucketConfig(replicas),
		envsBucketConfig(replicas),
		{Bucket: BucketMeta, History: 1, Description: "topology schema marker"},
	}
	for _, kc := range buckets {
		kc.Storage = jetstream.FileStorage
		kc.Replicas = replicas
		if err := untilPlaced(ctx, func(ctx context.Context) error { _, err := js.CreateOrUpdateKeyValue(ctx, kc); return err }); err != nil {
			return fmt.Errorf("create KV bucket %s: %w", kc.Bucket, err)
		}
	}
	for _, name := range LeaderReadBuckets {
		if err := leaderReads(ctx, js, name); err != nil {
			return err
		}
	}
	return writeSchema(ctx, js, replicas)
}

// LeaderReadBuckets are read from their stream leader only (AllowDirect off). A bucket with
// direct gets on has every replica answer reads, and on a cluster a follower may not have
// applied a write yet: a controller replica then read a run another replica had just created
// as missing and dropped the run's first result, leaving it queued for ever
// (BenchmarkClusterJobs with two replicas found it). Runs, pipeline sources, leases and merge
// queues decide things and need read-after-write; app status and registrations do not.
var LeaderReadBuckets = []string{BucketRuns, BucketSpecs, BucketLocks, BucketMergeQueue, BucketIdempotency}

func leaderReads(ctx context.Context, js jetstream.JetStream, bucket string) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return fmt.Errorf("KV bucket %s: %w", bucket, err)
	}
	cfg := s.CachedInfo().Config
	if !cfg.AllowDirect {
		return nil
	}
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("KV bucket %s: turn direct gets off: %w", bucket, err)
	}
	return nil
}

// openOrCreate opens the bucket cfg describes (a bounded handle, see BoundKV), creating it
// with the replicas of the locks bucket when it does not exist yet: buckets added after the
// first topology (merge queues, notification marks) are usable by components of any version.
func openOrCreate(ctx context.Context, js jetstream.JetStream, cfg func(replicas int) jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	name := cfg(1).Bucket
	kv, err := js.KeyValue(ctx, name)
	if err == nil {
		return BoundKV(kv, 0), nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("KV bucket %s: %w", name, err)
	}
	replicas := 1
	if locks, lerr := js.KeyValue(ctx, BucketLocks); lerr == nil {
		if st, serr := locks.Status(ctx); serr == nil {
			if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.StreamInfo() != nil {
				replicas = max(1, s.StreamInfo().Config.Replicas)
			}
		}
	}
	kv, err = js.CreateOrUpdateKeyValue(ctx, cfg(replicas))
	if err != nil {
		return nil, fmt.Errorf("create KV bucket %s: %w", name, err)
	}
	return BoundKV(kv, 0), nil
}

// Buckets are the KV handles components use.
type Buckets struct {
	Runs, Specs, Apps, Locks, Workers, Agents jetstream.KeyValue
}

// OpenBuckets looks up the KV buckets created by Setup.
func OpenBuckets(ctx context.Context, js jetstream.JetStream) (*Buckets, error) {
	b := &Buckets{}
	for name, dst := range map[string]*jetstream.KeyValue{
		BucketRuns: &b.Runs, BucketSpecs: &b.Specs, BucketApps: &b.Apps,
		BucketLocks: &b.Locks, BucketWorkers: &b.Workers, BucketAgents: &b.Agents,
	} {
		kv, err := js.KeyValue(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("KV bucket %s: %w (run Setup first)", name, err)
		}
		*dst = boundDirect(ctx, js, kv)
	}
	return b, nil
}

// PoolConsumerName is the durable consumer a pool's workers share.
func PoolConsumerName(pool string) string { return "pool-" + pool }

// ConnectorConsumerName is the durable consumer that the workers of pool holding connector
// share.
func ConnectorConsumerName(pool, connector string) string {
	return "pool-" + pool + "-c-" + Token(connector)
}

// ConnectorConsumer creates (or upgrades) the durable pull consumer of pool's jobs that need
// connector. Its subject overlaps no other consumer's, as a work-queue stream requires.
func ConnectorConsumer(ctx context.Context, js jetstream.JetStream, pool, connector string, cfg ConsumerTuning) (jetstream.Consumer, error) {
	cfg = cfg.withDefaults()
	return js.CreateOrUpdateConsumer(ctx, StreamJobs, jetstream.ConsumerConfig{
		Durable:       ConnectorConsumerName(pool, connector),
		FilterSubject: ConnectorJobSubject(pool, connector),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		Description:   "workers of pool " + pool + " holding connector " + connector,
	})
}

// PoolConsumer creates (or upgrades) the durable pull consumer a pool's workers share.
func PoolConsumer(ctx context.Context, js jetstream.JetStream, pool string, cfg ConsumerTuning) (jetstream.Consumer, error) {
	cfg = cfg.withDefaults()
	return js.CreateOrUpdateConsumer(ctx, StreamJobs, jetstream.ConsumerConfig{
		Durable:       PoolConsumerName(pool),
		FilterSubject: JobSubject(pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    cfg.MaxDeliver,
		MaxAckPending: cfg.MaxAckPending,
		Description:   "workers of pool " + pool,
	})
}

// ConsumerTuning sets a pool consumer's redelivery behaviour.
type ConsumerTuning struct {
	AckWait time.Duration // heartbeats are sent every AckWait/3
	// MaxDeliver bounds deliveries, and JetStream counts every delivery, run or not; the
	// job's dead letter then says "worker lost". So deliveries that run nothing are kept
	// out of the count where they can be: a worker asks only for free slots and never keeps
	// a request it can no longer account for (Puller), hands a job back unrun only with a
	// delay (HandBackDelay), and leaves a redelivery of a job it or another live worker
	// still runs pending instead of naking it. What remains are jobs not started when a
	// worker stops and redeliveries of a running job after a server restart (at most one
	// per restart): MaxDeliver is in effect the number of times a job may lose its worker
	// or fail transiently, less those.
	MaxDeliver    int
	MaxAckPending int
}

// DefaultTuning is used by workers unless flags say otherwise.
var DefaultTuning = ConsumerTuning{AckWait: 30 * time.Second, MaxDeliver: 5, MaxAckPending: 1000}

func (c ConsumerTuning) withDefaults() ConsumerTuning {
	if c.AckWait <= 0 {
		c.AckWait = DefaultTuning.AckWait
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = DefaultTuning.MaxDeliver
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultTuning.MaxAckPending
	}
	return c
}

// errCodeNoPeers is JetStream's "no suitable peers for placement" (JSClusterNoPeersErr;
// nats.go has no constant for it).
const errCodeNoPeers jetstream.ErrorCode = 10005

// setupAttempt bounds one create request of Setup. Creates are idempotent (create or
// update to the same config), so one whose reply was lost is simply asked again. A variable
// for the test that loses replies.
var setupAttempt = 10 * time.Second

// untilPlaced runs create again while the cluster cannot place the replicas yet (a peer still
// starting or restarting: "no suitable peers for placement"), has no meta leader for a moment,
// or lost the reply, until ctx ends. A server started with --replicas 3 beside nodes that are
// still coming up waits for them instead of exiting; a request lost in an election does not
// cost the whole of ctx.
func untilPlaced(ctx context.Context, create func(context.Context) error) error {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		actx, cancel := context.WithTimeout(ctx, setupAttempt)
		err := create(actx)
		cancel()
		var apiErr *jetstream.APIError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &apiErr):
			if apiErr.ErrorCode != errCodeNoPeers && apiErr.ErrorCode != errCodeClusterNotAvailable {
				return err
			}
		case !lostReply(ctx, err):
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}
