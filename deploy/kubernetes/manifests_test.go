package kubernetes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/prflow/prflow/queue"
	"github.com/prflow/prflow/scm"
)

// object is one rendered manifest: its identity, its YAML and the typed value it decoded into.
type object struct {
	APIVersion, Kind, Name, Namespace string
	YAML                              []byte
	Value                             any
}

func (o object) String() string { return o.Kind + "/" + o.Name }

// kinds maps every apiVersion/kind the manifests may use to its Go type. A kind missing here
// fails the test: nothing reaches a cluster unchecked.
var kinds = map[string]func() any{
	"v1/Namespace":                            func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount":                       func() any { return &corev1.ServiceAccount{} },
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/Deployment":                      func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":      func() any { return &networkingv1.NetworkPolicy{} },
	"networking.k8s.io/v1/Ingress":            func() any { return &networkingv1.Ingress{} },
	"keda.sh/v1alpha1/ScaledObject":           func() any { return &ScaledObject{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &ServiceMonitor{} },
}

// customKinds are not built into Kubernetes: a cluster needs KEDA / the Prometheus Operator.
var customKinds = []string{"ScaledObject", "ServiceMonitor"}

// ErrUnknownKind is returned for an apiVersion/kind without a Go type here.
var ErrUnknownKind = errors.New("no Go type for this apiVersion/kind")

// decodeStrict decodes one object as the API server does with fieldValidation=Strict: YAML to
// JSON refusing duplicate keys, then JSON into the typed struct refusing unknown fields, field
// names matched case-sensitively.
func decodeStrict(apiVersion, kind string, doc []byte) (any, error) {
	mk, ok := kinds[apiVersion+"/"+kind]
	if !ok {
		return nil, fmt.Errorf("%s %s: %w", apiVersion, kind, ErrUnknownKind)
	}
	js, err := sigsyaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	v := mk()
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return v, nil
}

// render builds an overlay with kustomize (the library kubectl uses for apply -k) and decodes
// every object strictly.
func render(t *testing.T, dir string) []object {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []object
	for _, r := range m.Resources() {
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		o := object{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), Namespace: r.GetNamespace(), YAML: doc}
		if o.Value, err = decodeStrict(o.APIVersion, o.Kind, doc); err != nil {
			t.Errorf("%s: %s: %v", dir, o, err)
			continue
		}
		objs = append(objs, o)
	}
	return objs
}

func overlays(t *testing.T) []string {
	dirs, err := filepath.Glob(filepath.Join("overlays", "*"))
	if err != nil || len(dirs) < 2 {
		t.Fatalf("overlays: %v %v", dirs, err)
	}
	return dirs
}

func TestManifestsRenderStrict(t *testing.T) {
	for _, dir := range overlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs := render(t, dir)
			if t.Failed() {
				return
			}
			byKind := map[string][]object{}
			for _, o := range objs {
				byKind[o.Kind] = append(byKind[o.Kind], o)
				if o.Kind != "Namespace" && o.Namespace != "prflow" {
					t.Errorf("%s: namespace %q, want prflow", o, o.Namespace)
				}
			}
			if got := len(byKind["Deployment"]); got != 3 {
				t.Errorf("%d Deployments, want server, worker and agent", got)
			}
			checkWorkloads(t, byKind)
			checkSelectors(t, byKind)
			if filepath.Base(dir) == "minimal" {
				for _, k := range customKinds {
					if len(byKind[k]) > 0 {
						t.Errorf("minimal overlay has a %s: it must apply on a cluster without custom resources", k)
					}
				}
				return
			}
			checkScaledObjects(t, byKind)
			checkServiceMonitors(t, byKind)
			checkIngress(t, byKind)
		})
	}
}

func deployments(byKind map[string][]object) map[string]*appsv1.Deployment {
	out := map[string]*appsv1.Deployment{}
	for _, o := range byKind["Deployment"] {
		d := o.Value.(*appsv1.Deployment)
		out[d.Spec.Template.Labels["app.kubernetes.io/component"]] = d
	}
	return out
}

// checkWorkloads: each role runs its subcommand with its config file from the ConfigMap, is
// probed on /healthz and /readyz, asks for resources and runs locked down.
func checkWorkloads(t *testing.T, byKind map[string][]object) {
	t.Helper()
	var cm *corev1.ConfigMap
	for _, o := range byKind["ConfigMap"] {
		if c := o.Value.(*corev1.ConfigMap); strings.HasPrefix(c.Name, "prflow-config") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no prflow-config ConfigMap")
	}
	deps := deployments(byKind)
	for _, role := range []string{"server", "worker", "agent"} {
		d := deps[role]
		if d == nil {
			t.Errorf("no Deployment for the %s", role)
			continue
		}
		ps := d.Spec.Template.Spec
		where := "Deployment/" + d.Name
		if role == "server" && (d.Spec.Replicas == nil || *d.Spec.Replicas != 2) {
			t.Errorf("%s: want 2 replicas", where)
		}
		if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token it does not need", where)
		}
		psc := ps.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod securityContext must run as a non-root uid with the RuntimeDefault seccomp profile: %+v", where, psc)
		}
		if len(ps.Containers) != 1 {
			t.Fatalf("%s: %d containers", where, len(ps.Containers))
		}
		c := ps.Containers[0]
		if !strings.Contains(c.Image, "/") || !strings.Contains(c.Image, ":") {
			t.Errorf("%s: image %q is not a registry reference with a tag (images: transformer missing?)", where, c.Image)
		}
		if len(c.Args) == 0 || c.Args[0] != role {
			t.Errorf("%s: args %v do not start with the subcommand %q", where, c.Args, role)
		}
		i := slices.Index(c.Args, "--config")
		if i < 0 || i+1 >= len(c.Args) || c.Args[i+1] != "/etc/prflow/config/"+role+".yaml" {
			t.Errorf("%s: args %v lack --config /etc/prflow/config/%s.yaml", where, c.Args, role)
		} else if _, ok := cm.Data[role+".yaml"]; !ok {
			t.Errorf("%s: the ConfigMap has no %s.yaml", where, role)
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = m
		}
		vols := map[string]corev1.Volume{}
		for _, v := range ps.Volumes {
			vols[v.Name] = v
		}
		if m, ok := mounts["/etc/prflow/config"]; !ok || vols[m.Name].ConfigMap == nil || vols[m.Name].ConfigMap.Name != cm.Name {
			t.Errorf("%s: /etc/prflow/config is not the ConfigMap %s", where, cm.Name)
		}
		if m, ok := mounts["/etc/prflow/secrets"]; !ok || vols[m.Name].Secret == nil || vols[m.Name].Secret.SecretName != "prflow-"+role {
			t.Errorf("%s: /etc/prflow/secrets is not the Secret prflow-%s", where, role)
		}
		if m, ok := mounts["/tmp"]; !ok || vols[m.Name].EmptyDir == nil {
			t.Errorf("%s: /tmp is not a writable emptyDir (the root filesystem is read-only)", where)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for _, pr := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
			if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path {
				t.Errorf("%s: %s must GET %s", where, pr.name, pr.path)
				continue
			}
			if _, ok := ports[pr.probe.HTTPGet.Port.String()]; !ok {
				t.Errorf("%s: %s port %s is not a container port %v", where, pr.name, pr.probe.HTTPGet.Port.String(), ports)
			}
		}
		if role != "server" {
			// The HTTP endpoint of worker and agent is --listen (the port the probes use).
			j := slices.Index(c.Args, "--listen")
			if j < 0 || j+1 >= len(c.Args) || c.Args[j+1] != fmt.Sprintf(":%d", ports["metrics"]) {
				t.Errorf("%s: args %v must --listen on the metrics port %d", where, c.Args, ports["metrics"])
			}
		}
		req := c.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() {
			t.Errorf("%s: no cpu/memory requests: %v", where, req)
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: no memory limit", where)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container securityContext must be read-only root, non-root, no privilege escalation, drop ALL: %+v", where, sc)
		}
	}
}

// checkSelectors: every Service, PodDisruptionBudget and NetworkPolicy selects some pods, and
// every Deployment is covered by a PDB and by a NetworkPolicy limiting both directions.
func checkSelectors(t *testing.T, byKind map[string][]object) {
	t.Helper()
	deps := deployments(byKind)
	selects := func(sel labels.Selector) []string {
		var roles []string
		for role, d := range deps {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				roles = append(roles, role)
			}
		}
		return roles
	}
	fromLabelSelector := func(o object, ls *metav1.LabelSelector) labels.Selector {
		if ls == nil {
			t.Errorf("%s: no selector", o)
			return labels.Nothing()
		}
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Errorf("%s: %v", o, err)
			return labels.Nothing()
		}
		return s
	}
	for _, d := range deps {
		if !fromLabelSelector(object{Kind: "Deployment", Name: d.Name}, d.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment/%s: selector does not match its own pods", d.Name)
		}
	}
	for _, o := range byKind["Service"] {
		s := o.Value.(*corev1.Service)
		if len(selects(labels.SelectorFromSet(s.Spec.Selector))) == 0 {
			t.Errorf("%s: selects no prflow pods", o)
		}
	}
	pdb := map[string]bool{}
	for _, o := range byKind["PodDisruptionBudget"] {
		p := o.Value.(*policyv1.PodDisruptionBudget)
		roles := selects(fromLabelSelector(o, p.Spec.Selector))
		if len(roles) != 1 {
			t.Errorf("%s: selects %v, want one role", o, roles)
		}
		for _, r := range roles {
			pdb[r] = true
		}
	}
	netpol := map[string]bool{}
	for _, o := range byKind["NetworkPolicy"] {
		np := o.Value.(*networkingv1.NetworkPolicy)
		roles := selects(fromLabelSelector(o, &np.Spec.PodSelector))
		if len(roles) == 0 {
			t.Errorf("%s: selects no prflow pods", o)
		}
		if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			for _, r := range roles {
				netpol[r] = true
			}
		}
	}
	for role := range deps {
		if !pdb[role] {
			t.Errorf("the %s has no PodDisruptionBudget", role)
		}
		if !netpol[role] {
			t.Errorf("the %s has no NetworkPolicy limiting ingress and egress", role)
		}
	}
}

// checkScaledObjects: KEDA scales the worker Deployment on the JetStream consumers its pool
// really uses, with the scaler's metadata keys spelled as KEDA reads them.
func checkScaledObjects(t *testing.T, byKind map[string][]object) {
	t.Helper()
	if len(byKind["ScaledObject"]) == 0 {
		t.Error("no ScaledObject for the workers")
	}
	deps := deployments(byKind)
	consumers := []string{queue.PoolConsumerName("default"), queue.ConnectorConsumerName("default", "release")}
	for _, o := range byKind["ScaledObject"] {
		so := o.Value.(*ScaledObject)
		if so.Spec.ScaleTargetRef == nil || deps["worker"] == nil || so.Spec.ScaleTargetRef.Name != deps["worker"].Name {
			t.Errorf("%s: does not scale the worker Deployment", o)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			t.Errorf("%s: minReplicaCount must keep one worker (run-start checks need a live worker)", o)
		}
		if len(so.Spec.Triggers) == 0 {
			t.Errorf("%s: no triggers", o)
		}
		for i, tr := range so.Spec.Triggers {
			if err := checkNATSTrigger(tr); err != nil {
				t.Errorf("%s: triggers[%d]: %v", o, i, err)
				continue
			}
			if tr.Metadata["stream"] != queue.StreamJobs || !slices.Contains(consumers, tr.Metadata["consumer"]) {
				t.Errorf("%s: triggers[%d] reads %s/%s, want %s and one of %v", o, i, tr.Metadata["stream"], tr.Metadata["consumer"], queue.StreamJobs, consumers)
			}
		}
	}
}

// checkNATSTrigger checks a trigger's metadata against KEDA's nats-jetstream scaler.
func checkNATSTrigger(tr ScaleTriggers) error {
	if tr.Type != "nats-jetstream" {
		return fmt.Errorf("type %q, want nats-jetstream", tr.Type)
	}
	for k := range tr.Metadata {
		if _, ok := NATSJetStreamMetadata[k]; !ok {
			return fmt.Errorf("metadata key %q is not one of KEDA's nats-jetstream scaler", k)
		}
	}
	for k, required := range NATSJetStreamMetadata {
		if required && tr.Metadata[k] == "" {
			return fmt.Errorf("metadata %q is required", k)
		}
	}
	return nil
}

func checkServiceMonitors(t *testing.T, byKind map[string][]object) {
	t.Helper()
	covered := map[string]bool{}
	for _, o := range byKind["ServiceMonitor"] {
		sm := o.Value.(*ServiceMonitor)
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var svc *corev1.Service
		for _, so := range byKind["Service"] {
			if s := so.Value.(*corev1.Service); sel.Matches(labels.Set(s.Labels)) {
				if svc != nil {
					t.Errorf("%s: selects more than one Service", o)
				}
				svc = s
			}
		}
		if svc == nil {
			t.Errorf("%s: selects no Service", o)
			continue
		}
		covered[svc.Spec.Selector["app.kubernetes.io/component"]] = true
		for _, ep := range sm.Spec.Endpoints {
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) || ep.Path != "/metrics" {
				t.Errorf("%s: endpoint %s%s is not a /metrics port of Service/%s", o, ep.Port, ep.Path, svc.Name)
			}
		}
	}
	for _, role := range []string{"server", "worker", "agent"} {
		if !covered[role] {
			t.Errorf("no ServiceMonitor scrapes the %s", role)
		}
	}
}

func checkIngress(t *testing.T, byKind map[string][]object) {
	t.Helper()
	for _, o := range byKind["Ingress"] {
		ing := o.Value.(*networkingv1.Ingress)
		if ing.Spec.IngressClassName != nil && *ing.Spec.IngressClassName == "nginx" {
			// ingress-nginx's default body cap (1m) would refuse large pushes before prflow sees them.
			v := ing.Annotations["nginx.ingress.kubernetes.io/proxy-body-size"]
			if n, ok := nginxSize(v); !ok || n != scm.DefaultMaxWebhookBody {
				t.Errorf("%s: proxy-body-size %q, want the server's webhook body limit (%d bytes, 25m)", o, v, scm.DefaultMaxWebhookBody)
			}
		}
		for _, r := range ing.Spec.Rules {
			for _, p := range r.HTTP.Paths {
				b := p.Backend.Service
				ok := slices.ContainsFunc(byKind["Service"], func(so object) bool {
					s := so.Value.(*corev1.Service)
					return s.Name == b.Name && slices.ContainsFunc(s.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == b.Port.Name })
				})
				if !ok {
					t.Errorf("%s: backend %s:%s is no Service port", o, b.Name, b.Port.Name)
				}
			}
		}
	}
}

// nginxSize reads an nginx size ("512", "8k", "25m", "1g"; k, m and g are powers of 1024).
func nginxSize(v string) (int64, bool) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(strings.ToLower(v), "k"):
		mult = 1 << 10
	case strings.HasSuffix(strings.ToLower(v), "m"):
		mult = 1 << 20
	case strings.HasSuffix(strings.ToLower(v), "g"):
		mult = 1 << 30
	}
	if mult > 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n * mult, true
}

// The strict decoding really refuses what the API server would refuse: each case breaks one
// rendered object the way a hand edit does, and must fail.
func TestStrictDecodeRefusesMistakes(t *testing.T) {
	objs := render(t, filepath.Join("overlays", "production"))
	find := func(kind, name string) object {
		for _, o := range objs {
			if o.Kind == kind && o.Name == name {
				return o
			}
		}
		t.Fatalf("no %s/%s", kind, name)
		return object{}
	}
	server := find("Deployment", "prflow-server")
	so := find("ScaledObject", "prflow-worker")
	sm := find("ServiceMonitor", "prflow-server")
	cases := []struct {
		name     string
		obj      object
		old, new string
		want     string
	}{
		{"unknown field", server, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: true\n          readOnly: true", `unknown field "spec.template.spec.containers[0].securityContext.readOnly"`},
		{"field name in the wrong case", server, "readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", `unknown field "spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"`},
		{"field at the wrong level", server, "        runAsNonRoot: true\n        runAsUser", "        runAsNonRoot: true\n        drop: [ALL]\n        runAsUser", `unknown field "spec.template.spec.securityContext.drop"`},
		{"duplicate key", server, "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", `"replicas"`},
		{"wrong type", server, "replicas: 2", "replicas: two", "replicas"},
		{"misspelled KEDA field", so, "minReplicaCount: 1", "minReplicas: 1", `unknown field "spec.minReplicas"`},
		{"misspelled ServiceMonitor field", sm, "endpoints:", "endpoint:", `unknown field "spec.endpoint"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodeStrict(tc.obj.APIVersion, tc.obj.Kind, tc.obj.YAML); err != nil {
				t.Fatalf("the unbroken object fails: %v", err)
			}
			broken := strings.Replace(string(tc.obj.YAML), tc.old, tc.new, 1)
			if broken == string(tc.obj.YAML) {
				t.Fatalf("%q not found in\n%s", tc.old, tc.obj.YAML)
			}
			_, err := decodeStrict(tc.obj.APIVersion, tc.obj.Kind, []byte(broken))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error with %s, got %v", tc.want, err)
			}
		})
	}
	if _, err := decodeStrict("apps/v1", "StatefulSet", server.YAML); !errors.Is(err, ErrUnknownKind) {
		t.Errorf("a kind without a Go type: %v", err)
	}
	// KEDA keeps trigger metadata in a free map: our check catches a misspelled scaler key.
	tr := (*so.Value.(*ScaledObject)).Spec.Triggers[0]
	md := map[string]string{}
	for k, v := range tr.Metadata {
		md[k] = v
	}
	md["lagTreshold"] = md["lagThreshold"]
	delete(md, "lagThreshold")
	tr.Metadata = md
	if err := checkNATSTrigger(tr); err == nil || !strings.Contains(err.Error(), "lagTreshold") {
		t.Errorf("misspelled scaler metadata: %v", err)
	}
}

// The NATS values file for the official chart is part of the documented setup: it must be
// valid YAML with a 3-node JetStream cluster.
func TestNATSValues(t *testing.T) {
	b, err := os.ReadFile("nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Config struct {
			Cluster struct {
				Enabled  bool `json:"enabled"`
				Replicas int  `json:"replicas"`
			} `json:"cluster"`
			JetStream struct {
				Enabled bool `json:"enabled"`
			} `json:"jetstream"`
			Monitor struct {
				Enabled bool `json:"enabled"`
			} `json:"monitor"`
		} `json:"config"`
	}
	if err := sigsyaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Config.Cluster.Enabled || v.Config.Cluster.Replicas != 3 || !v.Config.JetStream.Enabled || !v.Config.Monitor.Enabled {
		t.Errorf("nats-values.yaml: want cluster of 3 with JetStream and the monitoring port (KEDA reads it): %+v", v.Config)
	}
}
