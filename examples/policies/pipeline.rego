# Checked when a pipeline is loaded, validated or started: input is the pipeline.
package prflow.pipeline

# A stage that deploys to prod needs an Approval step before it changes anything.
deny contains msg if {
	some stage in input.stages
	stage.environment == "prod"
	not has_approval(stage)
	msg := sprintf("stage %s deploys to prod without an Approval step", [stage.id])
}

has_approval(stage) if {
	some step in stage.steps
	step.type == "Approval"
}
