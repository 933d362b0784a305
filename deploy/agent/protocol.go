// Package agent is the protocol between prflow and its GitOps agents: the app status record an
// agent keeps in the prflow-apps KV (one key per app, watched by the controller to wake parked
// steps), the request–reply messages an agent serves on prflow.agent.<agent>.{sync,apps,get},
// the registration every agent replica keeps alive in prflow-agents, and the Client steps use.
//
// Messages are JSON with a version field "v"; a reader refuses versions it does not know with
// CodeVersion. Errors travel back as an *Error with a Code callers can match with errors.Is.
//
// This package does not import queue: steps use it, and queue imports steps. Callers pass the KV
// handles (queue.Buckets.Apps and .Agents) in.
package agent

import (
	"time"

	"github.com/prflow/prflow/queue"
)

// Version is the protocol version of every message and record this package writes.
const Version = 1

// Info names prflow tags its sync operations with (Argo CD's sync "infos"). A waiting step
// finds the operation its own run started by them.
const (
	InfoRun  = "prflow.run"  // the run id
	InfoStep = "prflow.step" // "<stage>/<step>/<attempt>": tells two syncs of one run apart
)

// Operation phases. PhasePending is prflow's: the operation was requested (app.operation is
// set) but Argo CD's controller has not picked it up yet (status.operationState is null).
const (
	PhasePending     = "Pending"
	PhaseRunning     = "Running"
	PhaseTerminating = "Terminating"
	PhaseSucceeded   = "Succeeded"
	PhaseFailed      = "Failed"
	PhaseError       = "Error"
)

// Sync and health status codes (Argo CD's).
const (
	SyncSynced    = "Synced"
	SyncOutOfSync = "OutOfSync"
	SyncUnknown   = "Unknown"

	HealthHealthy     = "Healthy"
	HealthProgressing = "Progressing"
	HealthDegraded    = "Degraded"
	HealthSuspended   = "Suspended"
	HealthMissing     = "Missing"
	HealthUnknown     = "Unknown"
)

// AppStatus is one app's status record, the value of key StatusKey(agent, app) in prflow-apps.
// The agent writes it only when something other than ObservedAt changed.
type AppStatus struct {
	V     int    `json:"v"`
	Agent string `json:"agent"`
	// Name is the app's name; AppNamespace is set only for apps outside Argo CD's own
	// namespace (apps-in-any-namespace), and then Ref() is "namespace/name".
	Name           string            `json:"name"`
	AppNamespace   string            `json:"appNamespace,omitempty"`
	Project        string            `json:"project,omitempty"`
	Namespace      string            `json:"namespace,omitempty"` // destination namespace
	Cluster        string            `json:"cluster,omitempty"`   // destination name (in-cluster for the local server), else server URL
	ClusterServer  string            `json:"clusterServer,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	ApplicationSet string            `json:"applicationSet,omitempty"` // owning ApplicationSet
	Source         Source            `json:"source"`
	AutoSync       bool              `json:"autoSync,omitempty"`
	URL            string            `json:"url,omitempty"` // the app in the Argo CD UI

	Sync string `json:"sync"` // Synced, OutOfSync, Unknown
	// Revision is the revision the sync status was computed against (Argo CD's
	// status.sync.revision: the resolved target, not necessarily what is deployed).
	Revision string `json:"revision,omitempty"`
	// SyncedRevision is the revision of the last successful deployment (status.history).
	SyncedRevision string     `json:"syncedRevision,omitempty"`
	Health         string     `json:"health"`
	HealthMessage  string     `json:"healthMessage,omitempty"`
	HealthSince    time.Time  `json:"healthSince,omitzero"`
	Operation      *Operation `json:"operation,omitempty"`
	// Message summarises the app's conditions (ComparisonError, SyncError…), if any.
	Message   string          `json:"message,omitempty"`
	Resources ResourceSummary `json:"resources"`
	// ResourceVersion is Argo CD's metadata.resourceVersion; agents order updates by it.
	ResourceVersion string    `json:"resourceVersion,omitempty"`
	ObservedAt      time.Time `json:"observedAt,omitzero"`
	// ConfirmedAt is when the agent last wrote this record from what Argo CD answered. The
	// record is current while Stale is nil and the agent's leader registration is live and
	// not stale (see Client.View); an unchanged record is not rewritten, so ConfirmedAt alone
	// does not age it.
	ConfirmedAt time.Time `json:"confirmedAt,omitzero"`
	// Stale is set by the agent when it lost Argo CD (stream error, 401/403, unreachable):
	// the record shows the last thing the agent saw, not what Argo CD has now. Cleared by
	// the re-list after recovery.
	Stale *Staleness `json:"stale,omitempty"`
	// SyncWindows is what the sync windows of the app's project say now; nil when none
	// applies to the app. It changes only when a window opens or closes, or the windows are
	// edited, so it does not rewrite the record as time passes.
	SyncWindows *SyncWindows `json:"syncWindows,omitempty"`
	// UID and CreatedAt are Argo CD's metadata.uid and creationTimestamp: an app deleted and
	// created again under the same name (by its ApplicationSet) has a new UID.
	UID       string    `json:"uid,omitempty"`
	CreatedAt time.Time `json:"createdAt,omitzero"`
	// Deleted makes the record a tombstone: the app no longer exists. The record keeps the
	// app's identity (UID, ApplicationSet, destination) and nothing of its status; readers
	// must treat it as no app (Client.Status answers ErrDeleted). The agent removes it
	// TombstoneTTL after the deletion, or when the app appears again.
	Deleted *Deletion `json:"deleted,omitempty"`
}

// Deletion says when and why an agent saw an app go.
type Deletion struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// TombstoneTTL is how long a tombstone stays in prflow-apps: long enough for every waiting
// step to wake and read it (a parked step polls at least every few minutes).
const TombstoneTTL = time.Hour

// Gone reports whether the record is a tombstone.
func (s *AppStatus) Gone() bool { return s != nil && s.Deleted != nil }

// Tombstone reports whether a prflow-apps record decoded as a generic JSON object (the
// controller's policy readers) is a tombstone, so it is left out like a missing record.
func Tombstone(m map[string]any) bool {
	d, ok := m["deleted"]
	return ok && d != nil
}

// SyncWindows is the state of the Argo CD sync windows assigned to an app (AppProject
// spec.syncWindows matching the app), as Argo CD decides it: a deny window wins over an allow
// window, and when the app has allow windows, none of which is active, syncs are blocked too.
type SyncWindows struct {
	// Blocked: Argo CD would not run an automated sync now; prflow's syncs wait for Until
	// unless the step overrides the window (syncWindow: override, Argo CD's manual sync).
	Blocked bool `json:"blocked,omitempty"`
	// ManualSync: a manual sync is let through now (every active deny window, or with no
	// active deny window every allow window, has manualSync: true). Always true when not
	// Blocked.
	ManualSync bool `json:"manualSync,omitempty"`
	// Until is when the block ends: the first moment no window blocks an automated sync
	// (zero when not blocked, or when no opening was found within a year).
	Until time.Time `json:"until,omitzero"`
	// Windows are the windows assigned to the app, with the ones active now marked.
	Windows []SyncWindow `json:"windows,omitempty"`
	// Error says why the windows could not be read or evaluated. Argo CD refuses syncs while
	// its windows do not parse, so a record with an Error is Blocked with no Until.
	Error string `json:"error,omitempty"`
}

// SyncWindow is one Argo CD sync window (v1alpha1.SyncWindow, the fields that decide when).
type SyncWindow struct {
	Kind       string `json:"kind"`               // allow or deny
	Schedule   string `json:"schedule"`           // when it starts: a 5-field cron expression
	Duration   string `json:"duration"`           // how long it lasts (a Go duration: 1h30m)
	TimeZone   string `json:"timeZone,omitempty"` // of Schedule (IANA name; default UTC)
	ManualSync bool   `json:"manualSync,omitempty"`
	Active     bool   `json:"active,omitempty"`
}

// Describe is "blocked by sync window until <RFC3339>" (or why the end is not known) for a
// blocked state, "" otherwise.
func (w *SyncWindows) Describe() string {
	switch {
	case w == nil || !w.Blocked:
		return ""
	case w.Error != "":
		return "blocked by sync window (" + w.Error + ")"
	case w.Until.IsZero():
		return "blocked by sync window (it does not open within a year)"
	}
	return "blocked by sync window until " + w.Until.UTC().Format(time.RFC3339)
}

// Staleness says since when and why an agent cannot see its GitOps backend.
type Staleness struct {
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// Source is the app's (first) source.
type Source struct {
	RepoURL        string `json:"repoURL,omitempty"`
	Path           string `json:"path,omitempty"`
	TargetRevision string `json:"targetRevision,omitempty"`
	Chart          string `json:"chart,omitempty"`
}

// Operation is the app's current operation, or the last one when none is running.
type Operation struct {
	Phase      string    `json:"phase"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// RunID and Step are the prflow tags of the operation (empty when prflow did not start it).
	RunID       string `json:"runId,omitempty"`
	Step        string `json:"step,omitempty"`
	InitiatedBy string `json:"initiatedBy,omitempty"`
	Automated   bool   `json:"automated,omitempty"`
	// Revision is the revision the operation was asked to deploy (resolved to a commit by
	// Argo CD when the sync was requested); SyncedRevision is what its result reports.
	Revision       string `json:"revision,omitempty"`
	SyncedRevision string `json:"syncedRevision,omitempty"`
	RetryCount     int64  `json:"retryCount,omitempty"`
	DryRun         bool   `json:"dryRun,omitempty"`
}

// Finished reports whether the operation reached a terminal phase.
func (o *Operation) Finished() bool {
	return o != nil && (o.Phase == PhaseSucceeded || o.Phase == PhaseFailed || o.Phase == PhaseError)
}

// Tagged reports whether run and step (as in InfoStep) started this operation.
func (o *Operation) Tagged(run, step string) bool {
	return o != nil && run != "" && o.RunID == run && (step == "" || o.Step == step)
}

// ResourceSummary counts the app's resources by sync and health status.
type ResourceSummary struct {
	Total     int `json:"total"`
	OutOfSync int `json:"outOfSync,omitempty"`
	// RequiresPruning counts live resources no longer in git (OutOfSync until a sync prunes them).
	RequiresPruning int            `json:"requiresPruning,omitempty"`
	Health          map[string]int `json:"health,omitempty"`
}

// Ref is how requests name the app: "name", or "namespace/name" outside Argo CD's namespace.
func (s *AppStatus) Ref() string {
	if s.AppNamespace != "" {
		return s.AppNamespace + "/" + s.Name
	}
	return s.Name
}

// Refresh asks the agent to make Argo CD re-read git before answering.
type Refresh string

const (
	RefreshNone   Refresh = ""
	RefreshNormal Refresh = "normal"
	RefreshHard   Refresh = "hard" // also bypasses the repo-server's manifest and revision caches
)

// SyncRequest asks an agent to sync apps (subject prflow.agent.<agent>.sync).
type SyncRequest struct {
	V    int      `json:"v"`
	Apps []string `json:"apps"` // app refs
	// RunID and Step tag the operations (InfoRun, InfoStep) so the caller can find them again,
	// and make the request idempotent: an operation of the same run+step already running is
	// reported as AlreadyRunning, not started twice.
	RunID      string `json:"runId,omitempty"`
	Step       string `json:"step,omitempty"`
	Prune      bool   `json:"prune,omitempty"`
	DryRun     bool   `json:"dryRun,omitempty"`
	ApplyOnly  bool   `json:"applyOnly,omitempty"`  // Argo "apply" strategy (no hooks) instead of "hook"
	ForceApply bool   `json:"forceApply,omitempty"` // strategy.*.force
	// SyncOptions are Argo CD items ("CreateNamespace=true"); they are merged over the app's
	// own spec.syncPolicy.syncOptions by key, so unrelated app options are kept.
	SyncOptions []string       `json:"syncOptions,omitempty"`
	Retry       *RetryStrategy `json:"retryStrategy,omitempty"`
	Revision    string         `json:"revision,omitempty"` // default: the app's targetRevision
	// Refresh makes Argo CD re-read git before the sync, so a commit merged a moment ago is
	// what gets deployed rather than a cached older resolution of the branch.
	Refresh Refresh `json:"refresh,omitempty"`
	// Manual asks for Argo CD's manual-sync treatment of sync windows: a blocking window
	// whose manualSync is true lets the sync through. Without it the agent refuses to sync
	// while any window blocks an automated sync (Argo CD's API would otherwise treat every
	// request as manual). Refusals are CodeSyncWindow.
	Manual bool `json:"manual,omitempty"`
}

// RetryStrategy is Argo CD's sync retry policy.
type RetryStrategy struct {
	Limit   int64    `json:"limit"`
	Backoff *Backoff `json:"backoff,omitempty"`
}

// Backoff is Argo CD's retry backoff ("5s", factor 2, "3m").
type Backoff struct {
	Duration    string `json:"duration,omitempty"`
	Factor      int64  `json:"factor,omitempty"`
	MaxDuration string `json:"maxDuration,omitempty"`
}

// SyncReply answers a SyncRequest with one result per requested app, in request order.
type SyncReply struct {
	V       int          `json:"v"`
	Results []SyncResult `json:"results,omitempty"`
	Error   *Error       `json:"error,omitempty"` // the request as a whole failed
}

// SyncResult is the outcome of one app's sync request.
type SyncResult struct {
	App string `json:"app"`
	// AlreadyRunning: an operation tagged with the same run and step was already running.
	AlreadyRunning bool `json:"alreadyRunning,omitempty"`
	// Revision is the commit the operation will deploy, as Argo CD resolved it.
	Revision string `json:"revision,omitempty"`
	// At is when the agent asked Argo CD (its clock).
	At time.Time `json:"at,omitzero"`
	// UID is the uid of the app the sync went to (Argo CD's metadata.uid), so the caller
	// can tell the app it synced from one created later under the same name.
	UID   string `json:"uid,omitempty"`
	Error *Error `json:"error,omitempty"`
}

// AppsQuery lists apps (subject prflow.agent.<agent>.apps). All given filters must match.
type AppsQuery struct {
	V              int               `json:"v"`
	Selector       string            `json:"selector,omitempty"` // Kubernetes label selector
	Labels         map[string]string `json:"labels,omitempty"`   // equality, ANDed with Selector
	ApplicationSet string            `json:"applicationSet,omitempty"`
	NameRegex      string            `json:"nameRegex,omitempty"` // RE2, matched against the name
	Names          []string          `json:"names,omitempty"`
	Project        string            `json:"project,omitempty"`
}

// AppsReply answers an AppsQuery.
type AppsReply struct {
	V     int         `json:"v"`
	Apps  []AppStatus `json:"apps,omitempty"`
	Error *Error      `json:"error,omitempty"`
}

// GetRequest reads one app, optionally refreshing it first (subject prflow.agent.<agent>.get).
type GetRequest struct {
	V       int     `json:"v"`
	App     string  `json:"app"`
	Refresh Refresh `json:"refresh,omitempty"`
}

// GetReply answers a GetRequest.
type GetReply struct {
	V     int        `json:"v"`
	App   *AppStatus `json:"app,omitempty"`
	Error *Error     `json:"error,omitempty"`
}

// RefreshRequest asks an agent to make its GitOps backend re-read git for the ApplicationSets
// that generate apps from a repo (subject prflow.agent.<agent>.refresh), so an environment
// merged a moment ago gets its app in seconds instead of at the next poll (Argo CD's
// ApplicationSet controller re-reads git every 3 minutes). All given filters must match.
type RefreshRequest struct {
	V int `json:"v"`
	// ApplicationSet names one ApplicationSet ("name" or "namespace/name"); "" means every
	// ApplicationSet whose git generators read RepoURL.
	ApplicationSet string `json:"applicationSet,omitempty"`
	// RepoURL is the repo that was merged into: a URL or a forge path such as "acme/release"
	// (matched against the end of the generators' repoURL). "" matches any git generator.
	RepoURL string `json:"repoURL,omitempty"`
	// Branch is the branch that was merged into ("" when unknown).
	Branch string `json:"branch,omitempty"`
	// Wait makes the agent answer only once the backend has regenerated the apps (when it can
	// tell; see RefreshReply.Done).
	Wait bool `json:"wait,omitempty"`
}

// RefreshReply answers a RefreshRequest.
type RefreshReply struct {
	V int `json:"v"`
	// Mode is how the agent asked for the refresh: "annotate" (Argo CD's
	// application-set-refresh annotation through its API) or "webhook" (a signed push event).
	Mode string `json:"mode,omitempty"`
	// Refreshed are the ApplicationSets asked to refresh ("namespace/name").
	Refreshed []string `json:"refreshed,omitempty"`
	// Done: every refreshed ApplicationSet has finished regenerating its apps.
	Done bool `json:"done,omitempty"`
	// Unavailable (not Done): the backend cannot regenerate right now (why: e.g. Argo CD's
	// repo-server is down); the agent stopped waiting early rather than for its whole bound.
	Unavailable string `json:"unavailable,omitempty"`
	Error       *Error `json:"error,omitempty"`
}

// Registration is what each agent replica keeps in prflow-agents under
// RegistrationKey(agent, replica), renewed well within the bucket's TTL.
type Registration struct {
	V       int    `json:"v"`
	Agent   string `json:"agent"`
	Replica string `json:"replica"`
	Kind    string `json:"kind"`             // "argocd" or "simulated"
	Target  string `json:"target,omitempty"` // Argo CD URL or release repo (no credentials)
	Version string `json:"version,omitempty"`
	Leader  bool   `json:"leader"` // this replica writes app status
	Apps    int    `json:"apps"`
	Healthy bool   `json:"healthy"` // the replica reaches its GitOps backend
	Problem string `json:"problem,omitempty"`
	// Stale (leader only): the app records in prflow-apps are not current (the watch stream
	// is down, or the re-list after taking the lead or reconnecting has not finished).
	Stale      bool      `json:"stale,omitempty"`
	StaleSince time.Time `json:"staleSince,omitzero"`
	// LastResync (leader only) is when the agent last finished reading every app from its
	// backend (after connecting, and periodically or early while watching); Resyncs counts
	// those reads, and Repaired the records that the reads made while watching found behind
	// the backend (a change the watch stream did not deliver), since the replica started.
	LastResync time.Time `json:"lastResync,omitzero"`
	Resyncs    int64     `json:"resyncs,omitempty"`
	Repaired   int64     `json:"repaired,omitempty"`
	Started    time.Time `json:"started"`
	Seen       time.Time `json:"seen"`
	// Expires is when readers stop trusting this registration if it is not renewed (a few
	// heartbeats after Seen); zero means Seen plus the bucket's TTL.
	Expires time.Time `json:"expires,omitzero"`
}

// Subject is where an agent serves one kind of request ("sync", "apps", "get").
func Subject(agentID, kind string) string { return "prflow.agent." + Token(agentID) + "." + kind }

// QueueGroup is the NATS queue group all replicas of one agent serve requests in.
func QueueGroup(agentID string) string { return "prflow-agent-" + Token(agentID) }

// StatusKey is the prflow-apps key of an app reported by an agent: "<agent>.<app>" with both
// parts escaped to KV key characters (app is a Ref: "name" or "namespace/name").
func StatusKey(agentID, app string) string { return Token(agentID) + "." + Token(app) }

// InventoryKey is the prflow-apps key an agent rewrites whenever its set of apps changes (an
// app added or deleted, labels or owner changed). Steps waiting for an app that does not exist
// yet park on it. App names cannot start with "_", so it never collides with a StatusKey.
func InventoryKey(agentID string) string { return Token(agentID) + "._inventory" }

// RegistrationKey is the prflow-agents key of one replica of an agent.
func RegistrationKey(agentID, replica string) string { return Token(agentID) + "." + Token(replica) }

// Inventory is the value of InventoryKey.
type Inventory struct {
	V       int       `json:"v"`
	Apps    int       `json:"apps"`
	Updated time.Time `json:"updated"`
}

// Token escapes s into one NATS subject token / KV key segment, as queue.Token does for the
// job subjects: two different names never share a key.
func Token(s string) string { return queue.Token(s) }
