package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prflow/prflow/deploy/agent"
	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/environments"
	"github.com/prflow/prflow/pipelines/rbac"
	"github.com/prflow/prflow/queue"
)

// This file runs the environments model (pipelines/environments) inside the controller and
// serves it:
//
//	GET /api/v1/environments                  every environment: desired, live, drift
//	GET /api/v1/environments/{name}           one environment
//	GET /api/v1/environments/{name}/history   its last promotions, newest first (?limit=, default 20, at most 50)

// newEnvironments builds the model over the controller's buckets; Run runs it.
func (c *Controller) newEnvironments(ctx context.Context) error {
	hist, err := queue.OpenEnvHistory(ctx, c.conn.JS)
	if err != nil {
		return err
	}
	ac := agent.NewClient(c.conn.NC, c.b.Apps, c.b.Agents)
	c.envs = environments.New(environments.Sources{
		JS: c.conn.JS, Runs: c.b.Runs, Apps: c.b.Apps, Agents: c.b.Agents, History: hist,
		Pipeline: c.Pipeline,
		Triggers: func() []*pipelines.Pipeline {
			if ts := c.triggers.Load(); ts != nil {
				return ts.Pipelines
			}
			return nil
		},
		View:      ac.View,
		LoadEvent: c.loadStoredEvent,
		// Release values are read by a worker (it holds the connector's credentials): the job
		// goes out signed like a step's, and its result comes back through handle.
		Dispatch: c.publishJob,
		Registry: c.reg,
		Log:      c.log,
	})
	return nil
}

// Environments is what runs where, kept up to date from NATS (see pipelines/environments).
func (c *Controller) Environments() environments.Reader { return c.envs }

// envWait bounds how long a request waits for a model that is still reading its buckets.
const envWait = 10 * time.Second

func envErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, environments.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	}
	writeErr(w, code, err)
}

func (c *Controller) apiEnvironments(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), envWait)
	defer cancel()
	if !c.Policy().IsOpen() { // only the environments the caller may get (rbac.go)
		list, err := c.envs.List(ctx)
		if err != nil {
			envErr(w, err)
			return
		}
		u := UserFrom(r.Context())
		list = slices.DeleteFunc(list, func(e environments.Environment) bool { return !c.CanEnv(u, &e, rbac.Get) })
		if list == nil {
			list = []environments.Environment{}
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	// Encoded once per change of the model: 200 environments of 5 apps are about 1 MB.
	data, err := c.envs.ListJSON(ctx)
	if err != nil {
		envErr(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (c *Controller) apiEnvironment(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), envWait)
	defer cancel()
	e, err := c.envs.Get(ctx, r.PathValue("name"))
	if err != nil {
		envErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// DefaultHistoryLimit is how many promotions a history request returns without ?limit=.
const DefaultHistoryLimit = 20

func (c *Controller) apiEnvHistory(w http.ResponseWriter, r *http.Request) {
	limit := DefaultHistoryLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > environments.MaxHistory {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("limit %q: want a whole number from 1 to %d", s, environments.MaxHistory))
			return
		}
		limit = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), envWait)
	defer cancel()
	h, err := c.envs.History(ctx, r.PathValue("name"), limit)
	if err != nil {
		envErr(w, err)
		return
	}
	if h == nil {
		h = []environments.Promotion{}
	}
	writeJSON(w, http.StatusOK, h)
}
