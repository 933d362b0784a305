package main

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/environments"
)

// The environment commands: envs, env NAME, history ENV. Like the other read commands they
// take -o json|yaml|wide; the server answers them from memory (GET /api/v1/environments…).

func newEnvs(g *globals) *cobra.Command {
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "envs",
		Short: "List the environments: what git says, what runs, drift",
		Long: `envs lists every environment any pipeline promotes or any agent reports, grouped by
ApplicationSet (or promotion): the values the release branch holds and who put them there,
the apps' sync and health, and whether they drifted from git. -o wide adds the pipelines, the
apps one by one and the drift's reasons.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return getAndShow(cmd, g, &o, "/api/v1/environments", printEnvs)
		},
	}
	o.add(cmd)
	return cmd
}

func newEnv(g *globals) *cobra.Command {
	var o outputFlag
	cmd := &cobra.Command{
		Use:   "env NAME",
		Short: "Show one environment: desired values, who put them there, each app, drift",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return getAndShow(cmd, g, &o, "/api/v1/environments/"+url.PathEscape(args[0]),
				func(w io.Writer, e environments.Environment, wide bool, now time.Time) error {
					return printEnv(w, &e, wide, now)
				})
		},
	}
	o.add(cmd)
	return cmd
}

func newHistory(g *globals) *cobra.Command {
	var o outputFlag
	var limit int
	cmd := &cobra.Command{
		Use:   "history ENV",
		Short: "List an environment's last promotions, newest first: old → new, by whom, result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if limit < 1 || limit > environments.MaxHistory {
				return fmt.Errorf("--limit %d: want 1 to %d", limit, environments.MaxHistory)
			}
			path := "/api/v1/environments/" + url.PathEscape(args[0]) + "/history?limit=" + strconv.Itoa(limit)
			return getAndShow(cmd, g, &o, path, func(w io.Writer, h []environments.Promotion, wide bool, now time.Time) error {
				return printHistory(w, args[0], h, wide, now)
			})
		},
	}
	o.add(cmd)
	cmd.Flags().IntVar(&limit, "limit", 20, "promotions to list (newest first)")
	return cmd
}

func printEnvs(w io.Writer, envs []environments.Environment, wide bool, now time.Time) error {
	if len(envs) == 0 {
		_, err := fmt.Fprintln(w, "No environments: no pipeline declares one and no agent reports an app of one.")
		return err
	}
	header := []string{"GROUP", "ENVIRONMENT", "STATE", "DESIRED", "COMMIT", "BY", "APPS", "AGE"}
	if wide {
		header = append(header, "PIPELINES", "LIVE", "DRIFT")
	}
	t := newTable(w, header...)
	for _, e := range envs {
		row := []string{e.Group, e.Name, stateText(&e, now), desiredText(&e.Desired), dash(short(e.Desired.Commit)), byText(&e.Desired),
			appsSummary(e.Apps), age(e.Desired.At, now)}
		if wide {
			var live []string
			for _, a := range e.Apps {
				live = append(live, appText(a))
			}
			var drift string
			if e.Drift != nil {
				drift = strings.Join(e.Drift.Reasons, "; ")
			}
			row = append(row, dash(strings.Join(e.Pipelines, ",")), dash(strings.Join(live, ", ")), dash(drift))
		}
		t.row(row...)
	}
	return t.flush()
}

func printEnv(w io.Writer, e *environments.Environment, wide bool, now time.Time) error {
	fmt.Fprintf(w, "environment %s  group %s  pipelines %s\n", e.Name, e.Group, dash(strings.Join(e.Pipelines, ", ")))
	fmt.Fprintf(w, "state: %s\n", stateText(e, now))
	if e.Drift != nil {
		for _, r := range e.Drift.Reasons {
			fmt.Fprintf(w, "  drift: %s\n", r)
		}
	}
	d := &e.Desired
	fmt.Fprintf(w, "desired (%s %s):\n", dash(d.Repo), dash(d.Branch))
	switch {
	case d.Outside != nil:
		fmt.Fprintf(w, "  changed outside prflow by %s in %s, %s ago (%s)\n", d.Outside.Author, short(d.Outside.Commit), age(d.Outside.At, now), strings.Join(d.Outside.Files, ", "))
		for _, v := range d.Values {
			fmt.Fprintf(w, "  %s: %s = %v\n", v.File, v.Key, v.Value)
		}
		if d.ValuesUnknown {
			fmt.Fprintln(w, "  values: unknown (not read yet)")
		}
	case d.Commit == "" && len(d.Values) == 0:
		fmt.Fprintln(w, "  nothing yet: no promotion has merged a change of this environment")
	default:
		for _, v := range d.Values {
			fmt.Fprintf(w, "  %s: %s = %v\n", v.File, v.Key, v.Value)
		}
		fmt.Fprintf(w, "  commit %s by run %s (stage %s of %s), %s ago\n", dash(short(d.Commit)), dash(d.Run), dash(d.Stage), dash(d.Pipeline), age(d.At, now))
		if d.PR != "" {
			fmt.Fprintf(w, "  PR %s\n", d.PR)
		}
	}
	printRead(w, d.Read, now)
	if len(e.Apps) == 0 {
		_, err := fmt.Fprintln(w, "apps: none found (no agent reports an app of this environment)")
		return err
	}
	header := []string{"APP", "AGENT", "SYNC", "HEALTH", "REVISION", "HAS DESIRED", "SINCE"}
	if wide {
		header = append(header, "CLUSTER", "NAMESPACE", "WHY UNKNOWN")
	}
	t := newTable(w, header...)
	for _, a := range e.Apps {
		row := []string{a.Name, a.Agent, a.Sync, a.Health, dash(short(a.Revision)), a.HasDesired, age(a.Since, now)}
		if wide {
			row = append(row, dash(a.Cluster), dash(a.Namespace), dash(a.Unknown))
		}
		t.row(row...)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if !wide {
		for _, a := range e.Apps {
			if a.Unknown != "" {
				fmt.Fprintf(w, "%s: unknown: %s\n", a.Name, a.Unknown)
			}
		}
	}
	return nil
}

func printHistory(w io.Writer, env string, h []environments.Promotion, wide bool, now time.Time) error {
	if len(h) == 0 {
		_, err := fmt.Fprintf(w, "No promotion of %s has ended yet.\n", env)
		return err
	}
	header := []string{"AGE", "RESULT", "CHANGE", "RUN", "STAGE", "PIPELINE", "BY"}
	if wide {
		header = append(header, "COMMIT", "PR", "INPUTS")
	}
	t := newTable(w, header...)
	for _, p := range h {
		res := p.Result
		if p.RolledBack && p.Result != "rolledBack" {
			res += " (rolled back)"
		}
		var ch []string
		for _, c := range p.Changes {
			old := "?"
			if c.Old != nil {
				old = fmt.Sprint(c.Old)
			}
			ch = append(ch, fmt.Sprintf("%s: %s → %v", c.Key, old, c.New))
		}
		row := []string{age(p.At, now), res, dash(strings.Join(ch, ", ")), p.Run, p.Stage, p.Pipeline, dash(p.By)}
		if wide {
			var in []string
			for k, v := range p.Inputs {
				in = append(in, fmt.Sprintf("%s=%v", k, v))
			}
			row = append(row, dash(short(p.Commit)), dash(p.PR), dash(strings.Join(slices.Sorted(slices.Values(in)), ",")))
		}
		t.row(row...)
	}
	return t.flush()
}

func stateText(e *environments.Environment, now time.Time) string {
	if e.Drift != nil {
		return "drifted " + age(e.Drift.Since, now)
	}
	return e.State
}

// printRead says what reading the release files at the desired commit found (or why not).
func printRead(w io.Writer, r *environments.ValuesRead, now time.Time) {
	if r == nil {
		return
	}
	switch r.State {
	case "reading":
		fmt.Fprintf(w, "  reading the files at %s through the connector…\n", short(r.Commit))
	case "failed":
		retry := ""
		if !r.Retry.IsZero() {
			retry = fmt.Sprintf(" (trying again in %s)", r.Retry.Sub(now).Round(time.Second))
		}
		fmt.Fprintf(w, "  read at %s FAILED%s: %s\n", short(r.Commit), retry, r.Error)
	default:
		fmt.Fprintf(w, "  read from %s through the connector, %s ago\n", short(r.Commit), age(r.At, now))
	}
	for _, f := range r.Missing {
		fmt.Fprintf(w, "  %s: gone at %s (deleted)\n", f, short(r.Commit))
	}
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	for _, x := range r.Disagree {
		fmt.Fprintf(w, "  disagrees with its run: %s\n", x)
	}
}

func desiredText(d *environments.Desired) string {
	if d.ValuesUnknown || d.Outside != nil && len(d.Values) == 0 {
		return "unknown (changed outside prflow)"
	}
	var vals []string
	for _, v := range d.Values {
		vals = append(vals, fmt.Sprintf("%s=%v", v.Key, v.Value))
	}
	return dash(strings.Join(vals, ","))
}

func byText(d *environments.Desired) string {
	switch {
	case d.Outside != nil:
		return "outside prflow: " + d.Outside.Author
	case d.Run != "":
		return d.Run
	}
	return "-"
}

func appsSummary(apps []environments.App) string {
	if len(apps) == 0 {
		return "none"
	}
	ok, unknown := 0, 0
	for _, a := range apps {
		switch {
		case a.Unknown != "":
			unknown++
		case a.Sync == "Synced" && a.Health == "Healthy" && a.HasDesired == "yes":
			ok++
		}
	}
	s := fmt.Sprintf("%d/%d ok", ok, len(apps))
	if unknown > 0 {
		s += fmt.Sprintf(", %d unknown", unknown)
	}
	return s
}

func appText(a environments.App) string {
	if a.Unknown != "" {
		return a.Name + " Unknown"
	}
	s := a.Name + " " + a.Sync + "/" + a.Health
	if a.Revision != "" {
		s += "@" + short(a.Revision)
	}
	return s
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
