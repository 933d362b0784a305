package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/pipelines/controller"
)

// outputFlag is -o/--output of the read commands (status, runs, workers, logs, version), as
// kubectl and argocd name it: the default table, wide (more columns), json or yaml.
type outputFlag struct{ format string }

func (o *outputFlag) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "output format: json, yaml or wide (default a table)")
}

func (o *outputFlag) check() error {
	switch o.format {
	case "", "wide", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output %q: want json, yaml or wide", o.format)
}

func (o *outputFlag) wide() bool { return o.format == "wide" }

// client checks -o before it connects (a typo in -o fails without asking the server), then
// returns the client of the global flags.
func (o *outputFlag) client(g *globals) (*client, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	return g.client()
}

// getAndShow is a read command's whole answer: GET path into a T, printed as the document the
// server served for -o json|yaml, else by table (wide for -o wide).
func getAndShow[T any](cmd *cobra.Command, g *globals, o *outputFlag, path string, table func(io.Writer, T, bool, time.Time) error) error {
	c, err := o.client(g)
	if err != nil {
		return err
	}
	var v T
	if err := c.do(cmd.Context(), "GET", path, nil, &v); err != nil {
		return err
	}
	if o.structured() {
		return o.print(cmd.OutOrStdout(), v)
	}
	return table(cmd.OutOrStdout(), v, o.wide(), time.Now())
}

// structured reports whether v is printed as a document (json or yaml) rather than a table.
func (o *outputFlag) structured() bool { return o.format == "json" || o.format == "yaml" }

// print writes v as JSON or YAML. YAML keeps the JSON field names and order (the API's
// names), so both formats describe the same document.
func (o *outputFlag) print(w io.Writer, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if o.format == "json" {
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	}
	return writeYAML(w, data)
}

// writeYAML re-encodes a JSON document as block-style YAML (JSON is YAML; the node tree keeps
// the key order).
func writeYAML(w io.Writer, jsonDoc []byte) error {
	var n yaml.Node
	if err := yaml.Unmarshal(jsonDoc, &n); err != nil {
		return err
	}
	blockStyle(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode {
		n.Style = 0
	}
	if n.Kind == yaml.ScalarNode && n.Style == yaml.DoubleQuotedStyle && n.Tag == "!!str" {
		n.Style = 0 // quoted again by the encoder only where YAML needs it
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// table writes aligned columns with a header through text/tabwriter.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// age is how long ago t was, in kubectl's short style (45s, 12m, 3h, 5d); "-" for no time.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return shortDuration(now.Sub(t))
}

// span is how long something took from start to end (now while it goes on).
func span(start, end, now time.Time) string {
	if start.IsZero() {
		return "-"
	}
	if end.IsZero() {
		end = now
	}
	return shortDuration(end.Sub(start))
}

func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		m := int(d.Minutes())
		if s := int(d.Seconds()) % 60; s != 0 && m < 10 {
			return fmt.Sprintf("%dm%ds", m, s)
		}
		return fmt.Sprintf("%dm", m)
	case d < 48*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m != 0 && h < 10 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// runStart is when a run began: its start, or its creation while it has not started.
func runStart(r *pipelines.Run) time.Time {
	if !r.Started.IsZero() {
		return r.Started
	}
	return r.Created
}

// triggerText says what started a run: the CLI/API user, or the forge event with repo and
// PR or commit.
func triggerText(r *pipelines.Run) string {
	t := r.Trigger
	if t == nil || t.Kind == "" {
		if r.Executor != "" {
			return "api:" + r.Executor
		}
		return ""
	}
	s := t.Kind
	if t.Provider != "" {
		s = t.Provider + ":" + t.Event
	}
	if t.Repo != "" {
		s += " " + t.Repo
		switch {
		case t.PR > 0:
			s += fmt.Sprintf("#%d", t.PR)
		case len(t.SHA) >= 7:
			s += "@" + t.SHA[:7]
		}
	}
	return s
}

// printRuns is the run list: newest first, as the server sends it.
func printRuns(w io.Writer, runs []*controller.RunSummary, wide bool, now time.Time) error {
	h := []string{"ID", "PIPELINE", "STATUS", "AGE", "DURATION"}
	if wide {
		h = append(h, "TRIGGER", "STAGES", "ERROR")
	}
	t := newTable(w, h...)
	for _, r := range runs {
		head := &pipelines.Run{Created: r.Created, Started: r.Started, Trigger: r.Trigger, Executor: r.Executor}
		cells := []string{r.ID, r.Pipeline, string(r.Status), age(r.Created, now), span(runStart(head), r.Ended, now)}
		if wide {
			cells = append(cells, triggerText(head), fmt.Sprintf("%d/%d", r.StagesDone, r.StagesTotal), oneLine(r.Error, 80))
		}
		for i, c := range cells {
			cells[i] = dash(c)
		}
		t.row(cells...)
	}
	return t.flush()
}

// oneLine cuts a message to one line of at most n characters, for a table cell.
func oneLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > n {
		s = s[:n-3] + "..."
	}
	return s
}
