package ui

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// interventionView is the card of a stage waiting for a person's decision (a manual failure
// strategy): what failed, until when, what happens then, and the four buttons.
type interventionView struct {
	RunID, Stage, Env, Step, Error string
	Since, Deadline, Left          string
	OnTimeout                      string // what the timeout does, in words
	Decide                         bool
	NoDecide                       string
	CSRF                           string
}

// onTimeoutWords says what a manual strategy's onTimeout action does.
var onTimeoutWords = map[string]string{
	pipelines.ActFail:             "the stage fails (no rollback)",
	pipelines.ActIgnore:           "the failure is ignored and the stage goes on",
	pipelines.ActRollbackStage:    "the stage rolls back",
	pipelines.ActRollbackPipeline: "the pipeline rolls back",
}

func interventionOf(run *pipelines.Run, sr *pipelines.StageRun, env string, s *session, now time.Time) interventionView {
	iv := sr.Intervention
	v := interventionView{RunID: run.ID, Stage: sr.ID, Env: env, Step: iv.Step, Error: iv.Error,
		Since: iv.Since.UTC().Format("15:04:05"), Deadline: iv.Deadline.UTC().Format("2006-01-02 15:04 UTC"),
		Left: leftText(iv.Deadline.Sub(now)), OnTimeout: onTimeoutWords[iv.OnTimeout]}
	if s != nil {
		v.CSRF = s.csrf
		if err := controller.MayIntervene(run, sr.ID, s.user); err != nil {
			v.NoDecide = err.Error()
		} else {
			v.Decide = true
		}
	}
	return v
}

// intervene posts the card's decision (POST /ui/runs/{id}/intervene).
func (u *UI) intervene(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s := sessionFrom(r.Context())
	req := controller.InterveneRequest{Action: r.PostFormValue("action"), Comment: strings.TrimSpace(r.PostFormValue("comment"))}
	stage := r.PostFormValue("stage")
	rec, err := u.ctl.Intervene(r.Context(), id, stage, req, s.user)
	if err != nil {
		code := http.StatusInternalServerError
		if de := (*controller.DecisionError)(nil); errors.As(err, &de) {
			code = de.Code
		}
		u.fail(w, r, code, fmt.Sprintf("%s stage %s of run %s: %v", req.Action, stage, id, err))
		return
	}
	msg := fmt.Sprintf("%s.%s %s", stage, rec.Step, rec.Outcome)
	http.Redirect(w, r, "/ui/runs/"+id+"?msg="+urlq(msg), http.StatusSeeOther)
}

// leftText is time left as people write it: 2h, 1h30m, 45m, less than a minute.
func leftText(d time.Duration) string {
	if d < time.Minute {
		return "less than a minute"
	}
	s := strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	return strings.TrimSuffix(strings.Replace(s, "h0m", "h", 1), "0m")
}
