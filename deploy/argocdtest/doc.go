// Package argocdtest is an in-memory Argo CD (v3.2) for tests and for
// `prflow dev`: the REST API prflow uses, an application controller that
// syncs from real git repositories, and an ApplicationSet controller with
// list and git (files, directories) generators (evaluated by deploy/appset).
//
// It reproduces what the real server does and naive fakes get wrong (checked
// against a real Argo CD v3.2.11, see shared/realenv/README.md):
//
//   - non-GET requests without exactly "Content-Type: application/json" get
//     415 "Invalid content type" (plain text), DELETE included, before auth;
//   - errors are grpc-gateway v1 bodies {"error","code","message"} with the
//     gRPC code; a missing or non-JWT bearer token is 401 "no session
//     information", a bad JWT 401 "invalid session: ...";
//   - GET/sync/delete of a missing app is 403 "permission denied" (404 only
//     when ?project= names a project); a missing ApplicationSet is 404;
//   - a sync while an operation is running is 400 (FailedPrecondition)
//     "error setting app operation: another operation is already in progress";
//   - starting an operation clears status.operationState (null for one
//     event), and operationState.phase turns Succeeded one event BEFORE
//     sync/health are updated; status.sync.revision is the compared target
//     revision, not the deployed one;
//   - timestamps have second precision;
//   - the watch stream is one {"result":{"type","application"}} per line, or
//     SSE "data: ... \n\n" with ":" keepalives for Accept: text/event-stream;
//     it starts with ADDED for every matching app (unless resourceVersion is
//     given without a name) and suppresses identical consecutive messages.
//   - the ApplicationSet controller re-reads git only every 180s (WithAppSetPollInterval),
//     when the set's spec or labels change, or when the
//     argocd.argoproj.io/application-set-refresh annotation is added — through
//     POST /api/v1/applicationsets?upsert=true (v3.2 has no update call; upsert merges labels
//     and annotations) or by a GitHub push to the controller's own webhook
//     (AppSetWebhookURL, X-Hub-Signature-256 with WithWebhookSecret) — and removes the
//     annotation when done; the application controller's periodic pass
//     (WithReconcileInterval) does not regenerate sets. Deleting an app a set owns makes
//     the controller regenerate the set at once, so a generated app comes back as a new
//     object (new uid and creationTimestamp); a renamed template creates the new app, then
//     deletes the old one.
//   - PATCH /api/v1/applications/{name} applies a JSON patch (default) or a
//     merge patch to the app as stored, resourceVersion included, so a "test"
//     of it fails ("error applying patch: testing value ... failed", HTTP 500)
//     when the app changed since the caller read it; the result is validated
//     like a created app (400 InvalidSpecError for a revision that does not
//     resolve) and a changed target or Helm/Kustomize override makes the app
//     OutOfSync at the controller's next pass; it never syncs.
//   - sync windows (SetSyncWindows: an AppProject's spec.syncWindows) are matched to apps by
//     application, cluster and namespace globs (andOperator: all given ones) and evaluated at
//     the server's clock (WithClock): a sync the API is asked for counts as manual, so it is
//     refused (403, code 7, "cannot sync: blocked by sync window") only when manualSync does
//     not let it through; auto-sync waits for the window; GET
//     /api/v1/applications/{name}/syncwindows leaves out time zones and selectors, which GET
//     /api/v1/projects/{name} has.
//   - the diff preview's reads (diff.go): GET …/manifests?revision= renders the stored spec at
//     a revision (manifests only, tracking annotation, no namespace added), GET
//     …/managed-resources is the last comparison, POST /api/v1/applicationsets/generate
//     renders a given set without storing it (applicationsets create permission, see Deny);
//     Secret data never leaves the server unmasked ("++++++++", equal values equal masks).
//
// Tests drive it through its Go API: AddApp, AddApplicationSet, Reconcile,
// ScriptSync and StartOperation (failures, slow health, wrong revisions,
// foreign operations), SetHealth, DropStreams, SetStreamDelay, InjectFault
// and Requests.
package argocdtest
