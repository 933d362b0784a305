// The objects Argo CD deploys for one environment of the web service. The ApplicationSet
// (appset.yaml) passes each envs/<env>/config.json's values in as top-level arguments, so a
// promotion that edits config.json changes what is deployed, and a new environment needs no
// copy of this file.
//
// A ConfigMap stands in for the service's Deployment: it is Healthy on any cluster, pods or
// not. Its data.simulate is what the health check of prflow's test Argo CD reads (degraded,
// progressing or suspended); replace this object with your workload.
function(env, image, replicas, simulate='healthy') {
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name: 'web',
    labels: { 'app.kubernetes.io/name': 'web', 'app.kubernetes.io/instance': 'web-' + env },
  },
  data: {
    env: env,
    image: image,
    replicas: replicas,
    // An environment without `simulate` in its config.json leaves the ApplicationSet's
    // placeholder unresolved ("{{simulate}}"): that is healthy.
    simulate: if std.member(['degraded', 'progressing', 'suspended'], simulate) then simulate else 'healthy',
  },
}
