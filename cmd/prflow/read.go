package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
	"github.com/prflow/prflow/pipelines/runsummary"
	"github.com/prflow/prflow/steps/worker"
)

// The read commands: status, runs, workers, logs, version. Each takes -o json|yaml|wide.

// watchEvery is how often -w asks the server again.
var watchEvery = 500 * time.Millisecond

func newStatus(g *globals) *cobra.Command {
	var o outputFlag
	var asJSON, watch bool
	var limit int
	cmd := &cobra.Command{
		Use:   "status [RUN]",
		Short: "Show a run's stages and steps, or list recent runs",
		Long: `status RUN shows a run's stages and steps with their status, duration and outputs; without
RUN it lists recent runs (as prflow runs). -w keeps watching: a run's changes are printed as
they happen until it ends (exit 2 unless it succeeded, as run -f), the list's changed rows
until Ctrl-C.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON {
				o.format = "json"
			}
			c, err := o.client(g)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) == 0 {
				_, err := listRuns(cmd.Context(), c, out, &o, "limit="+strconv.Itoa(limit), watch)
				return err
			}
			if watch {
				return watchRun(cmd.Context(), c, args[0], out, cmd.ErrOrStderr(), &o)
			}
			var run pipelines.Run
			if err := c.do(cmd.Context(), "GET", "/api/v1/runs/"+url.PathEscape(args[0]), nil, &run); err != nil {
				return err
			}
			if o.structured() {
				return o.print(out, &run)
			}
			return printRun(out, &run, o.wide(), time.Now())
		},
	}
	o.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "same as -o json")
	_ = cmd.Flags().MarkHidden("json")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep watching: print changes as they happen")
	cmd.Flags().IntVar(&limit, "limit", 50, "runs to list (newest first)")
	return cmd
}

func newRuns(g *globals) *cobra.Command {
	var o outputFlag
	var watch bool
	var limit int
	var cursor string
	q := url.Values{}
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List recent runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(g)
			if err != nil {
				return err
			}
			if watch && cursor != "" {
				return errors.New("--cursor lists an older page; --watch follows the newest runs: use one of them")
			}
			q.Set("limit", strconv.Itoa(limit))
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			next, err := listRuns(cmd.Context(), c, cmd.OutOrStdout(), &o, q.Encode(), watch)
			if next != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more runs: prflow runs --cursor %s\n", next)
			}
			return err
		},
	}
	o.add(cmd)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep watching: print runs again when they change")
	cmd.Flags().IntVar(&limit, "limit", 50, "runs to list (newest first; the server gives at most 500 a page)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "list the page after the one that printed this cursor (\"more runs: ...\")")
	cmd.Flags().Var(queryFlag{q, "pipeline"}, "pipeline", "only runs of this pipeline")
	cmd.Flags().Var(queryFlag{q, "status"}, "status", "only runs in this state: active, waitingApproval, waiting, succeeded, failed, cancelled, rolledBack")
	return cmd
}

// queryFlag sets one query parameter of a list request.
type queryFlag struct {
	q   url.Values
	key string
}

func (f queryFlag) String() string     { return f.q.Get(f.key) }
func (f queryFlag) Type() string       { return "string" }
func (f queryFlag) Set(s string) error { f.q.Set(f.key, s); return nil }

// fetchRuns reads a page of the run list (query: limit, cursor, filters) and the next page's cursor.
func fetchRuns(ctx context.Context, c *client, query string) ([]*controller.RunSummary, string, error) {
	var runs []*controller.RunSummary
	h, err := c.doHeader(ctx, "GET", "/api/v1/runs?"+query, nil, nil, &runs)
	return runs, h.Get(controller.NextCursorHeader), err
}

// listRuns prints the run list; with watch it then prints each run again when its status
// changes (a new run, a run that ends), as kubectl get -w does, until ctx ends.
func listRuns(ctx context.Context, c *client, w io.Writer, o *outputFlag, query string, watch bool) (next string, err error) {
	runs, next, err := fetchRuns(ctx, c, query)
	if err != nil {
		return "", err
	}
	if !watch {
		if o.structured() {
			return next, o.print(w, runs)
		}
		return next, printRuns(w, runs, o.wide(), time.Now())
	}
	seen := map[string]pipelines.Status{}
	first := true
	for {
		var changed []*controller.RunSummary
		for i := len(runs) - 1; i >= 0; i-- { // oldest first, so that the newest ends the output
			if r := runs[i]; seen[r.ID] != r.Status {
				seen[r.ID] = r.Status
				changed = append(changed, r)
			}
		}
		if len(changed) > 0 || first {
			if err := printChanged(w, o, changed, first); err != nil {
				return "", err
			}
			first = false
		}
		select {
		case <-ctx.Done():
			return "", nil
		case <-time.After(watchEvery):
		}
		if runs, _, err = fetchRuns(ctx, c, query); err != nil {
			if ctx.Err() != nil {
				return "", nil
			}
			return "", err
		}
	}
}

// printChanged prints changed runs of a watch: one JSON document per line, YAML documents, or
// table rows (with the header only the first time).
func printChanged(w io.Writer, o *outputFlag, runs []*controller.RunSummary, header bool) error {
	switch o.format {
	case "json":
		enc := json.NewEncoder(w)
		for _, r := range runs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	case "yaml":
		for _, r := range runs {
			fmt.Fprintln(w, "---")
			if err := o.print(w, r); err != nil {
				return err
			}
		}
		return nil
	}
	var buf strings.Builder
	if err := printRuns(&buf, runs, o.wide(), time.Now()); err != nil {
		return err
	}
	text := buf.String()
	if !header {
		_, text, _ = strings.Cut(text, "\n")
	}
	_, err := io.WriteString(w, text)
	return err
}

// watchRun follows one run: the progress lines of run -f, or with -o json|yaml each changed
// state as a document. It ends with the run, with run -f's exit status.
func watchRun(ctx context.Context, c *client, id string, w, errw io.Writer, o *outputFlag) error {
	if !o.structured() {
		return followRun(ctx, c, id, w, errw)
	}
	var last []byte
	for {
		var run pipelines.Run
		if err := c.do(ctx, "GET", "/api/v1/runs/"+url.PathEscape(id), nil, &run); err != nil {
			return err
		}
		data, _ := json.Marshal(&run)
		if string(data) != string(last) {
			last = data
			if o.format == "json" {
				fmt.Fprintf(w, "%s\n", data)
			} else {
				fmt.Fprintln(w, "---")
				if err := writeYAML(w, data); err != nil {
					return err
				}
			}
		}
		if run.Status.Terminal() {
			return runOutcome(&run)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(watchEvery):
		}
	}
}

// printRun shows a run: a heading, then one row per stage and its steps (rollback steps
// marked), with status, duration and what each step did or waits for.
func printRun(w io.Writer, r *pipelines.Run, wide bool, now time.Time) error {
	fmt.Fprintf(w, "run %s  pipeline %s  %s", r.ID, r.Pipeline, r.Status)
	if r.Error != "" {
		fmt.Fprintf(w, "  (%s)", r.Error)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "created %s ago  duration %s", age(r.Created, now), span(runStart(r), r.Ended, now))
	if t := triggerText(r); t != "" {
		fmt.Fprintf(w, "  trigger %s", t)
	}
	fmt.Fprintln(w)
	if r.RollbackFailed != "" {
		fmt.Fprintf(w, "ROLLBACK FAILED, finish it by hand: %s\n", r.RollbackFailed)
	}
	if r.RerunOf != "" {
		fmt.Fprintf(w, "re-run of %s\n", r.RerunOf)
	}
	if r.RetryOf != "" {
		fmt.Fprintf(w, "retry of %s from its failed stage\n", r.RetryOf)
	}
	h := []string{"STAGE", "STEP", "TYPE", "STATUS", "AGE", "DURATION", "DETAIL"}
	if wide {
		h = []string{"STAGE", "STEP", "TYPE", "STATUS", "STARTED", "DURATION", "ATTEMPT", "WORKER", "DETAIL"}
	}
	t := newTable(w, h...)
	for _, s := range r.Stages {
		status := string(s.Status)
		if s.Status == pipelines.StNotRun {
			status = notRunText(s.Error)
		}
		detail := ""
		if s.Status != pipelines.StNotRun {
			detail = s.Error
		}
		if s.RollingBack {
			detail = strings.TrimSpace("rolling back " + detail)
		}
		if s.CarriedFrom != "" {
			detail = strings.TrimSpace("carried over from " + s.CarriedFrom + ", not run again " + detail)
		}
		if wide {
			t.row(s.ID, "", "", status, stamp(s.Started), span(s.Started, s.Ended, now), "", "", detail)
		} else {
			t.row(s.ID, "", "", status, age(s.Started, now), span(s.Started, s.Ended, now), oneLine(detail, 100))
		}
		for i, list := range [][]*pipelines.StepRun{s.Steps, s.Rollback} {
			for _, st := range list {
				id := "  " + st.ID
				if i == 1 {
					id = "  rollback:" + st.ID
				}
				status := string(st.Status)
				if st.Status == pipelines.StNotRun {
					status = notRunText(st.Error)
				}
				start := st.Started
				if start.IsZero() {
					start = st.Queued
				}
				if wide {
					t.row("", id, st.Type, status, stamp(start), span(start, st.Ended, now), strconv.Itoa(st.Attempt), st.Worker, stepDetailFull(st))
				} else {
					t.row("", id, st.Type, status, age(start, now), span(start, st.Ended, now), stepDetail(st))
				}
			}
		}
	}
	return t.flush()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// stepDetailFull is stepDetail without the cut, for -o wide.
func stepDetailFull(st *pipelines.StepRun) string {
	if len(st.Outputs) == 0 || st.Error != "" || st.Status == pipelines.StWaiting {
		return stepDetail(st)
	}
	return strings.Join(outputPairs(st.Outputs, "="), " ")
}

// outputPairs renders step outputs as sorted key<sep>value pairs, values whole (URLs
// included), lists and maps as compact JSON.
func outputPairs(outputs map[string]any, sep string) []string {
	keys := make([]string, 0, len(outputs))
	for k := range outputs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+sep+runsummary.Text(outputs[k]))
	}
	return out
}

func newWorkers(g *globals) *cobra.Command {
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "workers",
		Short: "List live workers with their pools, version and load",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client(g)
			if err != nil {
				return err
			}
			var ws []worker.Info
			if err := c.do(cmd.Context(), "GET", "/api/v1/workers", nil, &ws); err != nil {
				return err
			}
			sort.Slice(ws, func(i, j int) bool { return ws[i].ID < ws[j].ID })
			out := cmd.OutOrStdout()
			if o.structured() {
				return o.print(out, ws)
			}
			return printWorkers(out, ws, o.wide(), time.Now())
		},
	}
	o.add(cmd)
	return cmd
}

func printWorkers(w io.Writer, ws []worker.Info, wide bool, now time.Time) error {
	h := []string{"ID", "POOLS", "CONNECTORS", "VERSION", "RUNNING", "COMPLETED", "AGE", "SEEN"}
	if wide {
		h = append(h, "HOST", "STARTED")
	}
	t := newTable(w, h...)
	for _, x := range ws {
		conns := strings.Join(x.Connectors, ",")
		if conns == "" {
			conns = "-"
		}
		cells := []string{x.ID, strings.Join(x.Pools, ","), conns, x.Version, fmt.Sprintf("%d/%d", x.Running, x.Concurrency),
			strconv.FormatInt(x.Completed, 10), age(x.Started, now), age(x.Seen, now) + " ago"}
		if wide {
			cells = append(cells, x.Host, stamp(x.Started))
		}
		t.row(cells...)
	}
	return t.flush()
}

func newLogs(g *globals) *cobra.Command {
	var o outputFlag
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs RUN [STAGE.STEP]",
		Short: "Print a run's step logs",
		Long: `logs prints a run's step log lines (secrets masked by the worker): time, level, stage.step,
message and attributes. -o wide adds the date and time zone, -o json prints the lines as the
API serves them (one JSON object per line), -o yaml one document per line.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client(g)
			if err != nil {
				return err
			}
			path := "/api/v1/runs/" + url.PathEscape(args[0]) + "/logs?"
			if len(args) == 2 {
				if strings.Count(args[1], ".") != 1 {
					return fmt.Errorf("step: want STAGE.STEP, got %q", args[1])
				}
				path += "step=" + url.QueryEscape(args[1]) + "&"
			}
			if follow {
				path += "follow=1"
			}
			req, err := http.NewRequestWithContext(cmd.Context(), "GET", c.base+path, nil)
			if err != nil {
				return fmt.Errorf("--server %s: %w", c.base, err)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			resp, err := c.http.Do(req)
			if err != nil {
				return unreachable(c.base, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				return c.authHint(apiErr("GET", path, resp.StatusCode, b))
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			out := cmd.OutOrStdout()
			for sc.Scan() {
				if o.format == "json" {
					fmt.Fprintf(out, "%s\n", sc.Bytes())
					continue
				}
				var l worker.LogLine
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					continue
				}
				if o.format == "yaml" {
					fmt.Fprintln(out, "---")
					if err := writeYAML(out, sc.Bytes()); err != nil {
						return err
					}
					continue
				}
				printLogLine(out, &l, o.wide())
			}
			if err := sc.Err(); err != nil && cmd.Context().Err() == nil {
				return fmt.Errorf("reading logs from %s: %w", c.base, err)
			}
			return nil
		},
	}
	o.add(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing until the run ends")
	return cmd
}

func printLogLine(w io.Writer, l *worker.LogLine, wide bool) {
	var attrs []string
	for k, v := range l.Attrs {
		if k != "run" && k != "stage" && k != "step" {
			attrs = append(attrs, k+"="+v)
		}
	}
	sort.Strings(attrs)
	ts := l.Time.Local().Format("15:04:05.000")
	if wide {
		ts = l.Time.Local().Format("2006-01-02T15:04:05.000Z07:00")
	}
	line := fmt.Sprintf("%s %-5s %s.%s: %s", ts, l.Level, l.Stage, l.Step, l.Msg)
	if len(attrs) > 0 {
		line += " " + strings.Join(attrs, " ")
	}
	fmt.Fprintln(w, line)
}

// buildInfo is what `prflow version` reports.
type buildInfo struct {
	Version    string `json:"version"`
	Module     string `json:"module"`
	Commit     string `json:"commit,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	CommitDate string `json:"commitDate,omitempty"`
	BuildDate  string `json:"buildDate,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// buildDate may be set at build time with -ldflags "-X main.buildDate=…" (Go records no build
// time itself: builds are reproducible).
var buildDate = ""

// readBuildInfo reads the binary's module version and VCS stamp (runtime/debug.ReadBuildInfo);
// -ldflags "-X main.version=…" wins over the module version.
func readBuildInfo() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, version, buildDate)
}

func fromBuildInfo(bi *debug.BuildInfo, version, buildDate string) buildInfo {
	b := buildInfo{Version: version, Module: "github.com/prflow/prflow", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, BuildDate: buildDate}
	if bi == nil {
		return b
	}
	if bi.Main.Path != "" {
		b.Module = bi.Main.Path
	}
	if b.Version == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		case "vcs.time":
			b.CommitDate = s.Value
		}
	}
	return b
}

func (b buildInfo) String() string {
	s := b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " commit " + c
		if b.Modified {
			s += " (modified)"
		}
	}
	if b.CommitDate != "" {
		s += " committed " + b.CommitDate
	}
	if b.BuildDate != "" {
		s += " built " + b.BuildDate
	}
	return s + " " + b.Go + " " + b.Platform
}

func newVersion() *cobra.Command {
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print prflow's version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check(); err != nil {
				return err
			}
			b := readBuildInfo()
			out := cmd.OutOrStdout()
			if o.structured() {
				return o.print(out, b)
			}
			t := newTable(out, "MODULE", "VERSION", "COMMIT", "COMMITTED", "BUILT", "GO", "PLATFORM")
			commit := b.Commit
			if b.Modified {
				commit += "+modified"
			}
			t.row(b.Module, b.Version, dash(commit), dash(b.CommitDate), dash(b.BuildDate), b.Go, b.Platform)
			return t.flush()
		},
	}
	o.add(cmd)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
