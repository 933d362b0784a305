package main

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/prflow/prflow/steps/spelling"
	"github.com/prflow/prflow/yamlconf"
)

// ErrConfig marks every problem with a --config file, so callers can tell it from a runtime error.
var ErrConfig = errors.New("config file")

// configRoles are the long-running commands that take --config: a Deployment mounts one file
// instead of passing a dozen flags.
var configRoles = []string{"server", "worker", "agent"}

// notFromConfig are flags a config file may not set: they are about the invocation itself.
var notFromConfig = map[string]bool{"config": true, "help": true, "version": true}

// flagEnv names the environment variable a flag's default is read from: when it is set, it
// overrides the config file too (as the flag's help says, "env PRFLOW_NATS").
// TestFlagEnvMatchesHelp keeps this list and the help texts in step.
var flagEnv = map[string]string{
	"nats":     "PRFLOW_NATS",
	"server":   "PRFLOW_SERVER",
	"token":    "PRFLOW_TOKEN",
	"agent-id": "PRFLOW_AGENT_ID",
	"replica":  "POD_NAME",
	"config":   "PRFLOW_CONFIG",
}

// addConfigFlag gives cmd a --config flag, applied before it runs.
func addConfigFlag(cmd *cobra.Command) {
	var file string
	cmd.Flags().StringVar(&file, "config", os.Getenv("PRFLOW_CONFIG"),
		"YAML file of flag values (keys are flag names without --); flags and their env variables override it (env PRFLOW_CONFIG)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if file != "" {
			if err := applyConfigFile(c, file); err != nil {
				return err
			}
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
}

// applyConfigFile sets every flag of cmd that the file names, unless the flag was given on the
// command line or its environment variable (flagEnv) is set. Keys are the names of the flag
// set's flags exactly; an unknown or repeated key, a list for a single-valued flag, a nested
// map or a value the flag refuses is an error naming file:line:col, every one reported.
func applyConfigFile(cmd *cobra.Command, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	d, err := yamlconf.Parse(file, data)
	if err != nil {
		return fmt.Errorf("%w %w", ErrConfig, err)
	}
	if d.Root == nil {
		return nil // an empty file sets nothing
	}
	if d.Root.Kind != yaml.MappingNode {
		d.ErrorAt(d.Root, "", "want a mapping of flag names to values at the top level")
		return fmt.Errorf("%w %w", ErrConfig, d.Err())
	}
	// The keys a config file may set: the command's flags, from its flag set.
	fs := cmd.Flags()
	keys := map[string]*pflag.Flag{}
	fs.VisitAll(func(f *pflag.Flag) {
		if !notFromConfig[f.Name] && !f.Hidden {
			keys[f.Name] = f
		}
	})
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(d.Root.Content); i += 2 {
		k, v := d.Root.Content[i], d.Root.Content[i+1]
		name := k.Value
		switch f, first := keys[name], seen[name]; {
		case k.Kind != yaml.ScalarNode:
			d.ErrorAt(k, "", "a key must be a flag name")
		case first != nil:
			d.ErrorAt(k, "", "%q is set twice (first at line %d)", name, first.Line)
		case f == nil:
			d.ErrorAt(k, "", "unknown key %q for prflow %s%s", name, cmd.Name(), suggestFlag(keys, name))
		case f.Changed || envOverrides(f):
			// the command line and the environment win over the file
		default:
			if err := setFromNode(f, v); err != nil {
				d.ErrorAt(v, name, "%v", err)
			}
		}
		if k.Kind == yaml.ScalarNode && seen[name] == nil {
			seen[name] = k
		}
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w %w", ErrConfig, err)
	}
	return nil
}

// setFromNode sets one flag from a YAML value: a scalar for any flag, a sequence of scalars for
// list flags (e.g. pool: [default, release]).
func setFromNode(f *pflag.Flag, v *yaml.Node) error {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return errors.New("no value (write \"\" for an empty one)")
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			return sv.Replace([]string{v.Value})
		}
		return f.Value.Set(v.Value)
	case yaml.SequenceNode:
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return fmt.Errorf("takes one %s value, not a list", f.Value.Type())
		}
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return errors.New("list items must be plain values")
			}
			items = append(items, it.Value)
		}
		return sv.Replace(items)
	}
	return fmt.Errorf("takes a %s value, not a mapping", f.Value.Type())
}

// envOverrides reports whether the flag's environment variable is set to a value (the flags
// read these variables with os.Getenv, where empty means unset).
func envOverrides(f *pflag.Flag) bool {
	name, ok := flagEnv[f.Name]
	return ok && os.Getenv(name) != ""
}

// suggestFlag names the closest key, or lists them all when none is close.
func suggestFlag(keys map[string]*pflag.Flag, name string) string {
	names := make([]string, 0, len(keys))
	best, bestD := "", 3
	for k := range keys {
		names = append(names, k)
		if d := spelling.Distance(name, k); d < bestD || d == bestD && k < best {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	sort.Strings(names)
	return "; keys are its flags: " + strings.Join(names, ", ")
}
