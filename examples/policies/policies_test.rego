package prflow_test

import data.prflow.pipeline
import data.prflow.run
import data.prflow.stage

prod_stage(steps) := {"id": "prod", "environment": "prod", "steps": steps}

test_prod_without_approval_denied if {
	pipeline.deny["stage prod deploys to prod without an Approval step"] with input as {"stages": [prod_stage([{"id": "u", "type": "UpdateReleaseRepo"}])]}
}

test_prod_with_approval_allowed if {
	count(pipeline.deny) == 0 with input as {"stages": [prod_stage([{"id": "a", "type": "Approval"}, {"id": "u", "type": "UpdateReleaseRepo"}])]}
}

test_staging_needs_no_approval if {
	count(pipeline.deny) == 0 with input as {"stages": [{"id": "s", "environment": "staging", "steps": []}]}
}

test_tag_must_be_semver if {
	run.deny[`input tag: "latest" is not a semantic version (e.g. 1.4.2)`] with input as {"inputs": {"tag": "latest"}, "pipeline": {"stages": []}, "caller": {"user": "ann", "groups": []}}
}

test_semver_tag_allowed_and_prerelease_warned if {
	count(run.deny) == 0 with input as {"inputs": {"tag": "1.4.2-rc.1"}, "pipeline": {"stages": []}, "caller": {"user": "ann", "groups": []}}
	run.warn["input tag: 1.4.2-rc.1 is a pre-release"] with input as {"inputs": {"tag": "1.4.2-rc.1"}, "pipeline": {"stages": []}, "caller": {"user": "ann", "groups": []}}
}

test_prod_run_needs_group if {
	run.deny["bob may not start runs that deploy to prod (group release-managers only)"] with input as {"inputs": {}, "pipeline": {"stages": [prod_stage([])]}, "caller": {"user": "bob", "groups": ["dev"]}}
	count(run.deny) == 0 with input as {"inputs": {}, "pipeline": {"stages": [prod_stage([])]}, "caller": {"user": "ann", "groups": ["release-managers"]}}
}

staging_env := {"environments": [{"name": "staging", "clusters": [{"name": "staging-eu"}]}]}

test_prod_blocked_while_staging_degraded if {
	stage.deny["staging app web-staging is Degraded, not Healthy"] with input as {"stage": {"environment": "prod"}, "pipeline": staging_env, "apps": [{"name": "web-staging", "cluster": "staging-eu", "health": "Degraded"}]}
}

test_prod_blocked_without_staging_status if {
	count(stage.deny) == 1 with input as {"stage": {"environment": "prod"}, "pipeline": staging_env, "apps": []}
}

test_prod_allowed_when_staging_healthy if {
	count(stage.deny) == 0 with input as {"stage": {"environment": "prod"}, "pipeline": staging_env, "apps": [{"name": "web-staging", "labels": {"harness.io/envRef": "staging"}, "health": "Healthy"}]}
}

replicas_diff(value) := [{"app": "web-prod", "kind": "ConfigMap", "name": "web", "namespace": "web-prod", "change": "changed",
	"paths": ["data.replicas"], "values": {"data.replicas": value}, "masked": false}]

healthy_staging := {"pipeline": staging_env, "apps": [{"name": "web-staging", "cluster": "staging-eu", "health": "Healthy"}]}

test_prod_replicas_to_zero_denied if {
	stage.deny["ConfigMap web-prod/web: data.replicas goes to 0 in prod"] with input as object.union(healthy_staging, {"stage": {"id": "prod", "environment": "prod"}, "diff": replicas_diff("0")})
}

test_prod_replicas_scaled_allowed if {
	count(stage.deny) == 0 with input as object.union(healthy_staging, {"stage": {"id": "prod", "environment": "prod"}, "diff": replicas_diff("3")})
}

test_staging_replicas_to_zero_allowed if {
	count(stage.deny) == 0 with input as {"stage": {"id": "staging", "environment": "staging"}, "pipeline": staging_env, "apps": [], "diff": replicas_diff(0)}
}

secret_diff := [{"app": "web-dev", "kind": "Secret", "name": "db", "namespace": "web-dev", "change": "changed", "paths": ["data.password"], "values": {}, "masked": true}]

test_secret_change_without_approval_denied if {
	stage.deny["Secret web-dev/db changed (data.password) in stage dev, which has no Approval step"] with input as {"stage": {"id": "dev", "environment": "dev", "steps": [{"type": "UpdateReleaseRepo"}]}, "apps": [], "diff": secret_diff}
}

test_secret_change_with_approval_allowed if {
	count(stage.deny) == 0 with input as {"stage": {"id": "dev", "environment": "dev", "steps": [{"type": "Approval"}, {"type": "UpdateReleaseRepo"}]}, "apps": [], "diff": secret_diff}
}
