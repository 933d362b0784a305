# Checked when a run starts: input.pipeline, input.inputs, input.trigger, input.caller.
package prflow.run

semver := `^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`

# Image tags must be semantic versions (an input named tag or imageTag).
deny contains msg if {
	some name in {"tag", "imageTag"}
	tag := input.inputs[name]
	not regex.match(semver, sprintf("%v", [tag]))
	msg := sprintf("input %s: %q is not a semantic version (e.g. 1.4.2)", [name, tag])
}

# Only members of the release-managers group may start a run that deploys to prod.
deny contains msg if {
	some stage in input.pipeline.stages
	stage.environment == "prod"
	not "release-managers" in input.caller.groups
	msg := sprintf("%s may not start runs that deploy to prod (group release-managers only)", [input.caller.user])
}

warn contains msg if {
	some name in {"tag", "imageTag"}
	tag := input.inputs[name]
	regex.match(`-`, sprintf("%v", [tag]))
	msg := sprintf("input %s: %s is a pre-release", [name, tag])
}
