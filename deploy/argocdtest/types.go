package argocdtest

import (
	"bytes"
	"encoding/json"
	"time"
)

// The types below mirror the JSON of Argo CD v3.2's REST API (definitions
// v1alpha1Application, v1alpha1ApplicationSet and friends in Argo CD's
// swagger.json). Field names, omitempty choices and nesting follow the Go types
// Argo CD marshals with encoding/json, so that a client decoding the real
// server's answers decodes the fake's answers the same way. Sub-structures
// the fake never interprets (helm, kustomize, plugin, ...) are kept as raw JSON
// so that they round-trip unchanged.

// Time is a Kubernetes metav1.Time: it marshals to RFC 3339 in UTC with
// SECOND precision, and a zero Time marshals to null. The truncation is a real
// property of Argo CD's API that bites clients comparing timestamps with the
// local clock (Harness sleeps one second before syncing because of it).
type Time struct{ time.Time }

// NewTime wraps t, truncated to the second as the real API does.
func NewTime(t time.Time) Time { return Time{t.UTC().Truncate(time.Second)} }

// MarshalJSON renders t like metav1.Time does.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339))
}

// UnmarshalJSON accepts null and RFC 3339 strings.
func (t *Time) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		t.Time = time.Time{}
		return nil
	}
	p, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return err
	}
	t.Time = p.UTC()
	return nil
}

func timePtr(t time.Time) *Time {
	v := NewTime(t)
	return &v
}

// ObjectMeta is the subset of metav1.ObjectMeta Argo CD objects carry.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	Generation        int64             `json:"generation,omitempty"`
	CreationTimestamp Time              `json:"creationTimestamp"`
	DeletionTimestamp *Time             `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	OwnerReferences   []OwnerReference  `json:"ownerReferences,omitempty"`
	Finalizers        []string          `json:"finalizers,omitempty"`
}

// OwnerReference links a generated Application to its ApplicationSet.
type OwnerReference struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Controller         *bool  `json:"controller,omitempty"`
	BlockOwnerDeletion *bool  `json:"blockOwnerDeletion,omitempty"`
}

// ListMeta is metav1.ListMeta.
type ListMeta struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// Application is v1alpha1Application.
type Application struct {
	Metadata  ObjectMeta        `json:"metadata"`
	Spec      ApplicationSpec   `json:"spec"`
	Status    ApplicationStatus `json:"status,omitempty"`
	Operation *Operation        `json:"operation,omitempty"`
}

// ApplicationList is v1alpha1ApplicationList.
type ApplicationList struct {
	Metadata ListMeta      `json:"metadata"`
	Items    []Application `json:"items"`
}

// ApplicationSpec is v1alpha1ApplicationSpec.
type ApplicationSpec struct {
	Source               *ApplicationSource     `json:"source,omitempty"`
	Destination          ApplicationDestination `json:"destination"`
	Project              string                 `json:"project"`
	SyncPolicy           *SyncPolicy            `json:"syncPolicy,omitempty"`
	IgnoreDifferences    json.RawMessage        `json:"ignoreDifferences,omitempty"`
	Info                 []Info                 `json:"info,omitempty"`
	RevisionHistoryLimit *int64                 `json:"revisionHistoryLimit,omitempty"`
	Sources              []ApplicationSource    `json:"sources,omitempty"`
	SourceHydrator       json.RawMessage        `json:"sourceHydrator,omitempty"`
}

// primarySource is what Argo CD's ApplicationSpec.GetSource returns: the
// first of spec.sources for multi-source apps, else spec.source.
func (s ApplicationSpec) primarySource() ApplicationSource {
	if len(s.Sources) > 0 {
		return s.Sources[0]
	}
	if s.Source != nil {
		return *s.Source
	}
	return ApplicationSource{}
}

// project returns the effective project ("default" when empty).
func (s ApplicationSpec) project() string {
	if s.Project == "" {
		return "default"
	}
	return s.Project
}

// ApplicationSource is v1alpha1ApplicationSource.
type ApplicationSource struct {
	RepoURL        string          `json:"repoURL"`
	Path           string          `json:"path,omitempty"`
	TargetRevision string          `json:"targetRevision,omitempty"`
	Helm           json.RawMessage `json:"helm,omitempty"`
	Kustomize      json.RawMessage `json:"kustomize,omitempty"`
	Directory      json.RawMessage `json:"directory,omitempty"`
	Plugin         json.RawMessage `json:"plugin,omitempty"`
	Chart          string          `json:"chart,omitempty"`
	Ref            string          `json:"ref,omitempty"`
	Name           string          `json:"name,omitempty"`
}

// ApplicationDestination is v1alpha1ApplicationDestination.
type ApplicationDestination struct {
	Server    string `json:"server,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

// SyncPolicy is v1alpha1SyncPolicy.
type SyncPolicy struct {
	Automated                *SyncPolicyAutomated `json:"automated,omitempty"`
	SyncOptions              []string             `json:"syncOptions,omitempty"`
	Retry                    *RetryStrategy       `json:"retry,omitempty"`
	ManagedNamespaceMetadata json.RawMessage      `json:"managedNamespaceMetadata,omitempty"`
}

// SyncPolicyAutomated is v1alpha1SyncPolicyAutomated.
type SyncPolicyAutomated struct {
	Prune      bool  `json:"prune,omitempty"`
	SelfHeal   bool  `json:"selfHeal,omitempty"`
	AllowEmpty bool  `json:"allowEmpty,omitempty"`
	Enabled    *bool `json:"enabled,omitempty"`
}

// automatedEnabled reports whether auto-sync is on: automated is set and
// enabled is not explicitly false (the v3 semantics).
func (p *SyncPolicy) automatedEnabled() bool {
	return p != nil && p.Automated != nil && (p.Automated.Enabled == nil || *p.Automated.Enabled)
}

// RetryStrategy is v1alpha1RetryStrategy.
type RetryStrategy struct {
	Limit   int64    `json:"limit,omitempty"`
	Backoff *Backoff `json:"backoff,omitempty"`
	Refresh bool     `json:"refresh,omitempty"`
}

// Backoff is v1alpha1Backoff.
type Backoff struct {
	Duration    string `json:"duration,omitempty"`
	Factor      *int64 `json:"factor,omitempty"`
	MaxDuration string `json:"maxDuration,omitempty"`
}

// Info is v1alpha1Info: a name/value pair. prflow tags its sync operations
// with one (the run id) so it can recognise its own operation later.
type Info struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ApplicationStatus is v1alpha1ApplicationStatus.
type ApplicationStatus struct {
	Resources            []ResourceStatus       `json:"resources,omitempty"`
	Sync                 SyncStatus             `json:"sync,omitempty"`
	Health               HealthStatus           `json:"health,omitempty"`
	History              []RevisionHistory      `json:"history,omitempty"`
	Conditions           []ApplicationCondition `json:"conditions,omitempty"`
	ReconciledAt         *Time                  `json:"reconciledAt,omitempty"`
	OperationState       *OperationState        `json:"operationState,omitempty"`
	ObservedAt           *Time                  `json:"observedAt,omitempty"`
	SourceType           string                 `json:"sourceType,omitempty"`
	Summary              ApplicationSummary     `json:"summary,omitempty"`
	ResourceHealthSource string                 `json:"resourceHealthSource,omitempty"`
	SourceTypes          []string               `json:"sourceTypes,omitempty"`
	ControllerNamespace  string                 `json:"controllerNamespace,omitempty"`
}

// ApplicationSummary is v1alpha1ApplicationSummary.
type ApplicationSummary struct {
	ExternalURLs []string `json:"externalURLs,omitempty"`
	Images       []string `json:"images,omitempty"`
}

// SyncStatus is v1alpha1SyncStatus. Revision is the git revision the target
// state was COMPARED at (the resolved targetRevision), not the deployed one:
// after a commit and a refresh it already holds the new SHA while Status is
// OutOfSync.
type SyncStatus struct {
	Status     string     `json:"status"`
	ComparedTo ComparedTo `json:"comparedTo,omitempty"`
	Revision   string     `json:"revision,omitempty"`
	Revisions  []string   `json:"revisions,omitempty"`
}

// ComparedTo is v1alpha1ComparedTo.
type ComparedTo struct {
	Source            ApplicationSource      `json:"source,omitempty"`
	Destination       ApplicationDestination `json:"destination"`
	Sources           []ApplicationSource    `json:"sources,omitempty"`
	IgnoreDifferences json.RawMessage        `json:"ignoreDifferences,omitempty"`
}

// HealthStatus is v1alpha1AppHealthStatus / v1alpha1HealthStatus.
type HealthStatus struct {
	Status             string `json:"status,omitempty"`
	Message            string `json:"message,omitempty"`
	LastTransitionTime *Time  `json:"lastTransitionTime,omitempty"`
}

// Sync status codes.
const (
	SyncStatusSynced    = "Synced"
	SyncStatusOutOfSync = "OutOfSync"
	SyncStatusUnknown   = "Unknown"
)

// Health status codes, healthiest first.
const (
	HealthHealthy     = "Healthy"
	HealthSuspended   = "Suspended"
	HealthProgressing = "Progressing"
	HealthMissing     = "Missing"
	HealthDegraded    = "Degraded"
	HealthUnknown     = "Unknown"
)

// Operation phases.
const (
	PhaseRunning     = "Running"
	PhaseTerminating = "Terminating"
	PhaseFailed      = "Failed"
	PhaseError       = "Error"
	PhaseSucceeded   = "Succeeded"
)

// Stream event types.
const (
	EventAdded    = "ADDED"
	EventModified = "MODIFIED"
	EventDeleted  = "DELETED"
)

// OperationState is v1alpha1OperationState.
type OperationState struct {
	Operation  Operation            `json:"operation"`
	Phase      string               `json:"phase"`
	Message    string               `json:"message,omitempty"`
	SyncResult *SyncOperationResult `json:"syncResult,omitempty"`
	StartedAt  Time                 `json:"startedAt"`
	FinishedAt *Time                `json:"finishedAt,omitempty"`
	RetryCount int64                `json:"retryCount,omitempty"`
}

// Operation is v1alpha1Operation.
type Operation struct {
	Sync        *SyncOperation     `json:"sync,omitempty"`
	InitiatedBy OperationInitiator `json:"initiatedBy,omitempty"`
	Info        []Info             `json:"info,omitempty"`
	Retry       RetryStrategy      `json:"retry,omitempty"`
}

// OperationInitiator is v1alpha1OperationInitiator.
type OperationInitiator struct {
	Username  string `json:"username,omitempty"`
	Automated bool   `json:"automated,omitempty"`
}

// SyncOperation is v1alpha1SyncOperation.
type SyncOperation struct {
	Revision              string                  `json:"revision,omitempty"`
	Prune                 bool                    `json:"prune,omitempty"`
	DryRun                bool                    `json:"dryRun,omitempty"`
	SyncStrategy          *SyncStrategy           `json:"syncStrategy,omitempty"`
	Resources             []SyncOperationResource `json:"resources,omitempty"`
	Source                *ApplicationSource      `json:"source,omitempty"`
	Manifests             []string                `json:"manifests,omitempty"`
	SyncOptions           []string                `json:"syncOptions,omitempty"`
	Sources               []ApplicationSource     `json:"sources,omitempty"`
	Revisions             []string                `json:"revisions,omitempty"`
	AutoHealAttemptsCount int64                   `json:"autoHealAttemptsCount,omitempty"`
}

// SyncStrategy is v1alpha1SyncStrategy.
type SyncStrategy struct {
	Apply *SyncStrategyApply `json:"apply,omitempty"`
	Hook  *SyncStrategyHook  `json:"hook,omitempty"`
}

// SyncStrategyApply is v1alpha1SyncStrategyApply.
type SyncStrategyApply struct {
	Force bool `json:"force,omitempty"`
}

// SyncStrategyHook is v1alpha1SyncStrategyHook. The swagger names a nested
// "syncStrategyApply" field, but Argo CD's Go type inlines it, and the REST
// gateway decodes with encoding/json: the real wire form is {"force": true}.
type SyncStrategyHook struct {
	SyncStrategyApply
}

// SyncOperationResource is v1alpha1SyncOperationResource.
type SyncOperationResource struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// SyncOperationResult is v1alpha1SyncOperationResult.
type SyncOperationResult struct {
	Resources []ResourceResult    `json:"resources,omitempty"`
	Revision  string              `json:"revision"`
	Source    ApplicationSource   `json:"source,omitempty"`
	Sources   []ApplicationSource `json:"sources,omitempty"`
	Revisions []string            `json:"revisions,omitempty"`
}

// ResourceResult is v1alpha1ResourceResult.
type ResourceResult struct {
	Group     string `json:"group"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Status    string `json:"status,omitempty"`
	Message   string `json:"message,omitempty"`
	HookType  string `json:"hookType,omitempty"`
	HookPhase string `json:"hookPhase,omitempty"`
	SyncPhase string `json:"syncPhase,omitempty"`
}

// ResourceStatus is applicationv1alpha1ResourceStatus.
type ResourceStatus struct {
	Group           string        `json:"group,omitempty"`
	Version         string        `json:"version,omitempty"`
	Kind            string        `json:"kind,omitempty"`
	Namespace       string        `json:"namespace,omitempty"`
	Name            string        `json:"name,omitempty"`
	Status          string        `json:"status,omitempty"`
	Health          *HealthStatus `json:"health,omitempty"`
	Hook            bool          `json:"hook,omitempty"`
	RequiresPruning bool          `json:"requiresPruning,omitempty"`
	SyncWave        int64         `json:"syncWave,omitempty"`
}

// RevisionHistory is v1alpha1RevisionHistory.
type RevisionHistory struct {
	Revision        string              `json:"revision,omitempty"`
	DeployedAt      Time                `json:"deployedAt"`
	ID              int64               `json:"id"`
	Source          ApplicationSource   `json:"source,omitempty"`
	DeployStartedAt *Time               `json:"deployStartedAt,omitempty"`
	Sources         []ApplicationSource `json:"sources,omitempty"`
	Revisions       []string            `json:"revisions,omitempty"`
	InitiatedBy     OperationInitiator  `json:"initiatedBy,omitempty"`
}

// ApplicationCondition is v1alpha1ApplicationCondition.
type ApplicationCondition struct {
	Type               string `json:"type"`
	Message            string `json:"message"`
	LastTransitionTime *Time  `json:"lastTransitionTime,omitempty"`
}

// ApplicationWatchEvent is v1alpha1ApplicationWatchEvent.
type ApplicationWatchEvent struct {
	Type        string      `json:"type"`
	Application Application `json:"application"`
}

// SyncRequest is applicationApplicationSyncRequest, the body of
// POST /api/v1/applications/{name}/sync.
type SyncRequest struct {
	Name            string                  `json:"name,omitempty"`
	Revision        string                  `json:"revision,omitempty"`
	DryRun          bool                    `json:"dryRun,omitempty"`
	Prune           bool                    `json:"prune,omitempty"`
	Strategy        *SyncStrategy           `json:"strategy,omitempty"`
	Resources       []SyncOperationResource `json:"resources,omitempty"`
	Manifests       []string                `json:"manifests,omitempty"`
	Infos           []Info                  `json:"infos,omitempty"`
	RetryStrategy   *RetryStrategy          `json:"retryStrategy,omitempty"`
	SyncOptions     *SyncOptions            `json:"syncOptions,omitempty"`
	AppNamespace    string                  `json:"appNamespace,omitempty"`
	Project         string                  `json:"project,omitempty"`
	Revisions       []string                `json:"revisions,omitempty"`
	SourcePositions []json.Number           `json:"sourcePositions,omitempty"`
}

// SyncOptions is applicationSyncOptions.
type SyncOptions struct {
	Items []string `json:"items,omitempty"`
}

// ApplicationSet is v1alpha1ApplicationSet.
type ApplicationSet struct {
	Metadata ObjectMeta           `json:"metadata"`
	Spec     ApplicationSetSpec   `json:"spec"`
	Status   ApplicationSetStatus `json:"status,omitempty"`
}

// ApplicationSetList is v1alpha1ApplicationSetList.
type ApplicationSetList struct {
	Metadata ListMeta         `json:"metadata"`
	Items    []ApplicationSet `json:"items"`
}

// ApplicationSetSpec is v1alpha1ApplicationSetSpec. Only list and git
// generators are interpreted by the fake; the others are kept as raw JSON and
// reported as an ErrorOccurred condition.
type ApplicationSetSpec struct {
	GoTemplate                   bool                      `json:"goTemplate,omitempty"`
	Generators                   []ApplicationSetGenerator `json:"generators"`
	Template                     ApplicationSetTemplate    `json:"template"`
	SyncPolicy                   *ApplicationSetSyncPolicy `json:"syncPolicy,omitempty"`
	Strategy                     json.RawMessage           `json:"strategy,omitempty"`
	PreservedFields              json.RawMessage           `json:"preservedFields,omitempty"`
	GoTemplateOptions            []string                  `json:"goTemplateOptions,omitempty"`
	ApplyNestedSelectors         bool                      `json:"applyNestedSelectors,omitempty"`
	IgnoreApplicationDifferences json.RawMessage           `json:"ignoreApplicationDifferences,omitempty"`
	TemplatePatch                *string                   `json:"templatePatch,omitempty"`
}

// ApplicationSetSyncPolicy is v1alpha1ApplicationSetSyncPolicy.
type ApplicationSetSyncPolicy struct {
	PreserveResourcesOnDeletion bool   `json:"preserveResourcesOnDeletion,omitempty"`
	ApplicationsSync            string `json:"applicationsSync,omitempty"`
}

// ApplicationSetGenerator is v1alpha1ApplicationSetGenerator.
type ApplicationSetGenerator struct {
	List                    *ListGenerator  `json:"list,omitempty"`
	Clusters                json.RawMessage `json:"clusters,omitempty"`
	Git                     *GitGenerator   `json:"git,omitempty"`
	SCMProvider             json.RawMessage `json:"scmProvider,omitempty"`
	ClusterDecisionResource json.RawMessage `json:"clusterDecisionResource,omitempty"`
	PullRequest             json.RawMessage `json:"pullRequest,omitempty"`
	Matrix                  json.RawMessage `json:"matrix,omitempty"`
	Merge                   json.RawMessage `json:"merge,omitempty"`
	Selector                json.RawMessage `json:"selector,omitempty"`
	Plugin                  json.RawMessage `json:"plugin,omitempty"`
}

// ListGenerator is v1alpha1ListGenerator.
type ListGenerator struct {
	Elements []json.RawMessage      `json:"elements"`
	Template ApplicationSetTemplate `json:"template,omitempty"`
}

// GitGenerator is v1alpha1GitGenerator.
type GitGenerator struct {
	RepoURL             string                      `json:"repoURL"`
	Directories         []GitDirectoryGeneratorItem `json:"directories,omitempty"`
	Files               []GitFileGeneratorItem      `json:"files,omitempty"`
	Revision            string                      `json:"revision"`
	RequeueAfterSeconds *int64                      `json:"requeueAfterSeconds,omitempty"`
	Template            ApplicationSetTemplate      `json:"template,omitempty"`
	PathParamPrefix     string                      `json:"pathParamPrefix,omitempty"`
	Values              map[string]string           `json:"values,omitempty"`
}

// GitFileGeneratorItem is v1alpha1GitFileGeneratorItem.
type GitFileGeneratorItem struct {
	Path    string `json:"path"`
	Exclude bool   `json:"exclude,omitempty"`
}

// GitDirectoryGeneratorItem is v1alpha1GitDirectoryGeneratorItem.
type GitDirectoryGeneratorItem struct {
	Path    string `json:"path"`
	Exclude bool   `json:"exclude,omitempty"`
}

// ApplicationSetTemplate is v1alpha1ApplicationSetTemplate.
type ApplicationSetTemplate struct {
	Metadata ApplicationSetTemplateMeta `json:"metadata"`
	Spec     ApplicationSpec            `json:"spec"`
}

// ApplicationSetTemplateMeta is v1alpha1ApplicationSetTemplateMeta.
type ApplicationSetTemplateMeta struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Finalizers  []string          `json:"finalizers,omitempty"`
}

// ApplicationSetStatus is v1alpha1ApplicationSetStatus as served by v3.2
// (no health field; it was added after v3.2).
type ApplicationSetStatus struct {
	Conditions        []ApplicationSetCondition         `json:"conditions,omitempty"`
	ApplicationStatus []ApplicationSetApplicationStatus `json:"applicationStatus,omitempty"`
	Resources         []ResourceStatus                  `json:"resources,omitempty"`
	ResourcesCount    int64                             `json:"resourcesCount,omitempty"`
}

// ApplicationSetCondition is v1alpha1ApplicationSetCondition.
type ApplicationSetCondition struct {
	Type               string `json:"type"`
	Message            string `json:"message"`
	LastTransitionTime *Time  `json:"lastTransitionTime,omitempty"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
}

// ApplicationSetApplicationStatus is v1alpha1ApplicationSetApplicationStatus.
type ApplicationSetApplicationStatus struct {
	Application        string   `json:"application"`
	LastTransitionTime *Time    `json:"lastTransitionTime,omitempty"`
	Message            string   `json:"message"`
	Status             string   `json:"status"`
	Step               string   `json:"step"`
	TargetRevisions    []string `json:"targetrevisions"`
}

// VersionMessage is versionVersionMessage (GET /api/version).
type VersionMessage struct {
	Version          string `json:"Version"`
	BuildDate        string `json:"BuildDate,omitempty"`
	GitCommit        string `json:"GitCommit,omitempty"`
	GitTag           string `json:"GitTag,omitempty"`
	GitTreeState     string `json:"GitTreeState,omitempty"`
	GoVersion        string `json:"GoVersion,omitempty"`
	Compiler         string `json:"Compiler,omitempty"`
	Platform         string `json:"Platform,omitempty"`
	KustomizeVersion string `json:"KustomizeVersion,omitempty"`
	HelmVersion      string `json:"HelmVersion,omitempty"`
	KubectlVersion   string `json:"KubectlVersion,omitempty"`
	JsonnetVersion   string `json:"JsonnetVersion,omitempty"`
	ExtraBuildInfo   string `json:"ExtraBuildInfo,omitempty"`
}

// ErrorBody is the body of a failed unary call (swagger runtimeError): the
// grpc-gateway v1 shape Argo CD uses, with the gRPC code in Code.
type ErrorBody struct {
	Error   string            `json:"error"`
	Code    int               `json:"code"`
	Message string            `json:"message"`
	Details []json.RawMessage `json:"details,omitempty"`
}

// StreamError is the error object of a failed stream (swagger
// runtimeStreamError), sent as {"error": StreamError}.
type StreamError struct {
	GrpcCode   int               `json:"grpc_code,omitempty"`
	HTTPCode   int               `json:"http_code,omitempty"`
	Message    string            `json:"message,omitempty"`
	HTTPStatus string            `json:"http_status,omitempty"`
	Details    []json.RawMessage `json:"details,omitempty"`
}
