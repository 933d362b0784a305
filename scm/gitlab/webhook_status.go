package gitlab

import (
	"errors"

	"github.com/prflow/prflow/scm"
)

type hookPipeline struct {
	User *struct {
		Username string `json:"username"`
	} `json:"user"`
	Project          *hookProject `json:"project"`
	ObjectAttributes *struct {
		ID     int64  `json:"id"`
		Name   string `json:"name"`
		SHA    string `json:"sha"`
		Status string `json:"status"`
	} `json:"object_attributes"`
}

// parsePipelineEvent normalises a Pipeline Hook to an EventStatus on the pipeline's commit;
// steps waiting for checks (MergePR) wake on it.
func parsePipelineEvent(data []byte) (*scm.Event, error) {
	var p hookPipeline
	if err := scm.DecodeWebhookJSON(data, &p); err != nil {
		return nil, err
	}
	if p.Project == nil || p.Project.PathWithNamespace == "" {
		return nil, errors.New("payload has no project.path_with_namespace")
	}
	if p.ObjectAttributes == nil || p.ObjectAttributes.SHA == "" {
		return nil, errors.New("payload has no object_attributes.sha")
	}
	ev := &scm.Event{Kind: scm.EventStatus, Repo: scm.Repo(p.Project.PathWithNamespace), SHA: p.ObjectAttributes.SHA,
		Context: p.ObjectAttributes.Name, State: pipelineState(p.ObjectAttributes.Status)}
	if ev.Context == "" {
		ev.Context = "pipeline"
	}
	if p.User != nil {
		ev.Sender = p.User.Username
	}
	return ev, nil
}

func pipelineState(s string) scm.StatusState {
	switch s {
	case "success":
		return scm.StatusSuccess
	case "failed":
		return scm.StatusFailure
	case "canceled", "skipped":
		return scm.StatusError
	}
	return scm.StatusPending // created, waiting_for_resource, preparing, pending, running, manual, scheduled
}
