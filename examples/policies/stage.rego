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
