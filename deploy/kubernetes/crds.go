// Package kubernetes holds prflow's Kubernetes manifests (a kustomize base, optional components
// and overlays) and the checks that keep them valid: every rendered object decodes strictly
// into its Kubernetes Go type, and the two custom resources into the structs below.
package kubernetes

import (
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources the manifests use, mirrored from their upstream schemas (KEDA
// keda.sh/v1alpha1 ScaledObject, Prometheus Operator monitoring.coreos.com/v1 ServiceMonitor):
// the fields listed are the upstream ones with their JSON names, so a misspelled or
// misplaced field fails strict decoding. Fields prflow does not use are left out; adding one to
// the manifests means adding it here from the upstream type.

// ScaledObject is KEDA's keda.sh/v1alpha1 ScaledObject.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec mirrors KEDA's ScaledObjectSpec.
type ScaledObjectSpec struct {
	ScaleTargetRef        *ScaleTarget      `json:"scaleTargetRef"`
	PollingInterval       *int32            `json:"pollingInterval,omitempty"`
	InitialCooldownPeriod *int32            `json:"initialCooldownPeriod,omitempty"`
	CooldownPeriod        *int32            `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount      *int32            `json:"idleReplicaCount,omitempty"`
	MinReplicaCount       *int32            `json:"minReplicaCount,omitempty"`
	MaxReplicaCount       *int32            `json:"maxReplicaCount,omitempty"`
	Advanced              *AdvancedConfig   `json:"advanced,omitempty"`
	Triggers              []ScaleTriggers   `json:"triggers"`
	Fallback              *FallbackSettings `json:"fallback,omitempty"`
}

// ScaleTarget mirrors KEDA's ScaleTarget.
type ScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

// AdvancedConfig mirrors KEDA's AdvancedConfig (without scalingModifiers).
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                           `json:"restoreToOriginalReplicaCount,omitempty"`
}

// HorizontalPodAutoscalerConfig mirrors KEDA's type; behavior is the HPA's own.
type HorizontalPodAutoscalerConfig struct {
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
	Name     string                                         `json:"name,omitempty"`
}

// ScaleTriggers mirrors KEDA's ScaleTriggers.
type ScaleTriggers struct {
	Type              string                   `json:"type"`
	Name              string                   `json:"name,omitempty"`
	UseCachedMetrics  bool                     `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string        `json:"metadata"`
	AuthenticationRef *AuthenticationTargetRef `json:"authenticationRef,omitempty"`
	MetricType        string                   `json:"metricType,omitempty"`
}

// AuthenticationTargetRef mirrors KEDA's type.
type AuthenticationTargetRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// FallbackSettings mirrors KEDA's Fallback.
type FallbackSettings struct {
	FailureThreshold int32 `json:"failureThreshold"`
	Replicas         int32 `json:"replicas"`
}

// NATSJetStreamMetadata are the trigger metadata keys of KEDA's nats-jetstream scaler (v2.8+):
// metadata is a free map in the CRD, so the check of its keys is ours.
var NATSJetStreamMetadata = map[string]bool{
	"natsServerMonitoringEndpoint": true, // required
	"account":                      true, // required ("$G" without accounts)
	"stream":                       true, // required
	"consumer":                     true, // required
	"lagThreshold":                 true, // required
	"activationLagThreshold":       false,
	"useHttps":                     false,
}

// ServiceMonitor is the Prometheus Operator's monitoring.coreos.com/v1 ServiceMonitor.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServiceMonitorSpec `json:"spec"`
}

// ServiceMonitorSpec mirrors the upstream spec (the commonly used fields).
type ServiceMonitorSpec struct {
	JobLabel          string               `json:"jobLabel,omitempty"`
	TargetLabels      []string             `json:"targetLabels,omitempty"`
	PodTargetLabels   []string             `json:"podTargetLabels,omitempty"`
	Endpoints         []Endpoint           `json:"endpoints"`
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector *NamespaceSelector   `json:"namespaceSelector,omitempty"`
	SampleLimit       *uint64              `json:"sampleLimit,omitempty"`
}

// Endpoint mirrors the upstream Endpoint (without auth and relabelling).
type Endpoint struct {
	Port          string            `json:"port,omitempty"`
	Path          string            `json:"path,omitempty"`
	Scheme        string            `json:"scheme,omitempty"`
	Params        map[string]string `json:"params,omitempty"`
	Interval      string            `json:"interval,omitempty"`
	ScrapeTimeout string            `json:"scrapeTimeout,omitempty"`
	HonorLabels   bool              `json:"honorLabels,omitempty"`
}

// NamespaceSelector mirrors the upstream type.
type NamespaceSelector struct {
	Any        bool     `json:"any,omitempty"`
	MatchNames []string `json:"matchNames,omitempty"`
}
