// Package environments is prflow's model of what runs where: for every environment any
// pipeline promotes (its `environments:`, its `promotion:`, and the ApplicationSets the agents
// report), the desired state (what the head of the release branch holds, and which run, PR or
// hand commit put it there), the live state of each app (from the agents' records in
// prflow-apps), the drift between the two, and the history of its promotions.
//
// The model is built from NATS state only (pipelines, prflow-runs, prflow-apps, the
// environments' history bucket, push events in PRFLOW_SCM) and kept in memory, so reading it
// never calls a forge or Argo CD.
package environments

import (
	"context"
	"errors"
	"time"
)

// Environment is one environment across all pipelines.
type Environment struct {
	Name string `json:"name"`
	// Group is what the environment is listed under: its ApplicationSet ("appset:web") or,
	// without one, the promotion it belongs to; environments of one group are ordered as the
	// promotion orders them.
	Group          string   `json:"group"`
	ApplicationSet string   `json:"applicationSet,omitempty"`
	Order          int      `json:"order"`               // position in its group's promotion order
	Pipelines      []string `json:"pipelines,omitempty"` // pipelines that promote it
	Desired        Desired  `json:"desired"`
	Apps           []App    `json:"apps"`
	// State sums the environment up: "synced" (every app Synced, Healthy and running the
	// desired commit), "drifted" (see Drift), "progressing", "unknown" (an agent is offline or
	// stale, or no app was found), "empty" (nothing desired yet).
	State string `json:"state"`
	Drift *Drift `json:"drift,omitempty"` // nil unless State is "drifted"
}

// Value is one desired value in the release repo.
type Value struct {
	File  string `json:"file"`
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// Desired is what the release branch holds for the environment and who put it there.
type Desired struct {
	Repo   string   `json:"repo,omitempty"`
	Branch string   `json:"branch,omitempty"`
	Files  []string `json:"files,omitempty"`
	Values []Value  `json:"values,omitempty"`
	// ValuesUnknown: the files were changed outside prflow since and have not been read (yet,
	// or the read failed: see Read), so the model cannot say what they hold (Values is empty).
	ValuesUnknown bool `json:"valuesUnknown,omitempty"`
	// Read is the read of the files at Commit through the connector (a worker's
	// ReadReleaseValues job): done after a hand commit and after each merge prflow made.
	Read *ValuesRead `json:"read,omitempty"`
	// Commit is the release-branch commit that last changed the environment's files.
	Commit string    `json:"commit,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// By prflow: the run, stage, pipeline and PR of that change.
	Run      string `json:"run,omitempty"`
	Stage    string `json:"stage,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	PR       string `json:"pr,omitempty"` // the PR's URL
	// Outside is set when the last change was not made by a prflow run (a hand commit).
	Outside *OutsideChange `json:"outside,omitempty"`
}

// OutsideChange is a change of the environment's files that no prflow run made.
type OutsideChange struct {
	Author string    `json:"author"`
	Commit string    `json:"commit"`
	At     time.Time `json:"at,omitzero"`
	Files  []string  `json:"files,omitempty"`
}

// ValuesRead is the state of reading the environment's files at a commit of the release
// branch (the controller holds no forge credentials: a worker reads them).
type ValuesRead struct {
	// State: "reading" (dispatched, or retrying a forge error), "read", "failed".
	State  string    `json:"state"`
	Commit string    `json:"commit"`
	At     time.Time `json:"at,omitzero"` // when it was read, or failed
	// Error says why the read failed ("read envs/dev/config.json at 1a2b…: 403 …"); with
	// Retry set, another attempt is made then.
	Error    string    `json:"error,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Retry    time.Time `json:"retry,omitzero"`
	// Missing are files of the environment the commit does not hold (deleted).
	Missing []string `json:"missing,omitempty"`
	// Problems are keys the read could not report (not in the file, file not parseable).
	Problems []string `json:"problems,omitempty"`
	// Disagree lists values where the branch holds something else than the run that made
	// Commit wrote (the branch wins: Values shows what it holds).
	Disagree []string `json:"disagree,omitempty"`
}

// App is one app of the environment as its agent reports it.
type App struct {
	Agent     string `json:"agent"`
	Name      string `json:"name"`
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	URL       string `json:"url,omitempty"`
	Sync      string `json:"sync"`   // Synced, OutOfSync, Unknown
	Health    string `json:"health"` // Healthy, Progressing, Degraded, … Unknown
	Revision  string `json:"revision,omitempty"`
	// HasDesired says whether Revision contains the desired commit: "yes", "no" or "unknown"
	// (prflow cannot tell, e.g. a commit it never saw pushed).
	HasDesired string `json:"hasDesired"`
	// Unknown says why the live state is not known (agent offline or stale); Sync and
	// Health are then "Unknown", never what the last record said.
	Unknown string    `json:"unknown,omitempty"`
	Since   time.Time `json:"since,omitzero"` // when the app entered its current state
}

// Drift is why live differs from desired, and since when.
type Drift struct {
	Reasons []string  `json:"reasons"` // e.g. "web-prod is OutOfSync", "web-prod runs 1a2b3c4, not 5d6e7f8"
	Since   time.Time `json:"since"`
}

// Change is one value a promotion changed.
type Change struct {
	File string `json:"file"`
	Key  string `json:"key"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new"`
}

// Promotion is one entry of an environment's history.
type Promotion struct {
	Environment string         `json:"environment"`
	Pipeline    string         `json:"pipeline"`
	Run         string         `json:"run"`
	Stage       string         `json:"stage"`
	Inputs      map[string]any `json:"inputs,omitempty"` // the run's inputs, to roll back to
	Changes     []Change       `json:"changes,omitempty"`
	By          string         `json:"by,omitempty"`
	At          time.Time      `json:"at"`
	// Result is the stage's end: succeeded, failed, rolledBack, cancelled, alreadyPromoted.
	Result     string `json:"result"`
	RolledBack bool   `json:"rolledBack,omitempty"`
	PR         string `json:"pr,omitempty"`
	Commit     string `json:"commit,omitempty"` // the merge commit
}

// Reader is what the API, the CLI and the UI read the model through.
type Reader interface {
	// List returns every environment, grouped and ordered (group, then Order, then name).
	List(ctx context.Context) ([]Environment, error)
	// Get returns one environment; ErrNotFound when no pipeline or agent knows it.
	Get(ctx context.Context, name string) (*Environment, error)
	// History returns the environment's last promotions, newest first, at most limit.
	History(ctx context.Context, name string, limit int) ([]Promotion, error)
	// Changed returns a channel that receives (coalesced) whenever any environment changed,
	// and a function that stops it.
	Changed() (<-chan struct{}, func())
}

// ErrNotFound is returned by Get and History for an environment nobody knows.
var ErrNotFound = errors.New("environment not found")
