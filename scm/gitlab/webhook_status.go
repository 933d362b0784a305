package gitlab

import (
	"errors"

	gl "gitlab.com/gitlab-org/api/client-go"

	"github.com/prflow/prflow/scm"
)

// normPipeline normalises a Pipeline Hook to an EventStatus on the pipeline's commit; steps
// waiting for checks (MergePR) wake on it.
func normPipeline(p *gl.PipelineEvent) (*scm.Event, error) {
	repo, err := projectName(p.Project.PathWithNamespace)
	if err != nil {
		return nil, err
	}
	a := p.ObjectAttributes
	if a.SHA == "" {
		return nil, errors.New("payload has no object_attributes.sha")
	}
	ev := &scm.Event{Kind: scm.EventStatus, Repo: repo, SHA: a.SHA, Context: a.Name, State: pipelineState(a.Status)}
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
