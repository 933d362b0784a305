# Checked before each stage starts: input.stage, input.environment, input.pipeline, input.run
# and input.apps (the live app status records from prflow-apps).
package prflow.stage

# No promotion to prod while staging is not Healthy.
deny contains msg if {
	input.stage.environment == "prod"
	count(staging_apps) == 0
	msg := "no staging app status is known: prod waits for a Healthy staging"
}

deny contains msg if {
	input.stage.environment == "prod"
	some app in staging_apps
	app.health != "Healthy"
	msg := sprintf("staging app %s is %s, not Healthy", [app.name, app.health])
}

# The apps of the staging environment: labelled with it, or running on one of its clusters.
staging_apps contains app if {
	some app in input.apps
	app.labels["harness.io/envRef"] == "staging"
}

staging_apps contains app if {
	some env in input.pipeline.environments
	env.name == "staging"
	some cluster in env.clusters
	some app in input.apps
	app.cluster == cluster.name
}

# input.diff is what the stage's PR deploys, as its DiffPreview step found (the stage policy is
# asked again after the preview, before the merge; before it, input.diff is empty). One entry
# per resource: {app, kind, name, namespace, change, paths, values, masked}.

# No workload scaled to zero replicas in prod.
deny contains msg if {
	input.stage.environment == "prod"
	some d in input.diff
	some path, value in d.values
	endswith(path, "replicas")
	to_number(value) == 0
	msg := sprintf("%s %s/%s: %s goes to 0 in prod", [d.kind, d.namespace, d.name, path])
}

# A Secret changes only in a stage that asks a person first.
deny contains msg if {
	some d in input.diff
	d.kind == "Secret"
	not has_approval
	msg := sprintf("Secret %s/%s %s (%s) in stage %s, which has no Approval step", [d.namespace, d.name, d.change, concat(", ", d.paths), input.stage.id])
}

has_approval if {
	some s in input.stage.steps
	s.type == "Approval"
}
