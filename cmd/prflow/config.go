package main

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/prflow/prflow/steps/spelling"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// ErrConfig marks every problem with a --config file, so callers can tell it from a runtime error.
var ErrConfig = errors.New("config file")

// configRoles are the long-running commands that take --config: a Deployment mounts one file
// instead of passing a dozen flags.
var configRoles = []string{"server", "worker", "agent"}

// notFromConfig are flags a config file may not set: they are about the invocation itself.
var notFromConfig = map[string]bool{"config": true, "help": true, "version": true}

// envInUsage finds the environment variable a flag's help names, e.g. "(env PRFLOW_NATS)" or
// "(default env PRFLOW_TOKEN)": that variable overrides the config file too.
var envInUsage = regexp.MustCompile(`\benv ([A-Z][A-Z0-9_]*)`)

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
// command line or the environment variable its help names is set. Keys are flag names exactly;
// an unknown or repeated key, a list for a single-valued flag, a nested map or a value the flag
// refuses is an error naming file:line:col.
func applyConfigFile(cmd *cobra.Command, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		return fmt.Errorf("%w %s: %v", ErrConfig, file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = extra.Line
		}
		return fmt.Errorf("%w %s:%d: want one YAML document, found another", ErrConfig, file, line)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return configErr(file, root, "want a mapping of flag names to values at the top level")
	}
	fs := cmd.Flags()
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			return configErr(file, k, "a key must be a flag name")
		}
		if first, dup := seen[name]; dup {
			return configErr(file, k, "%q is set twice (first at line %d)", name, first.Line)
		}
		seen[name] = k
		f := fs.Lookup(name)
		if f == nil || notFromConfig[name] || f.Hidden {
			return configErr(file, k, "unknown key %q for prflow %s%s", name, cmd.Name(), suggestFlag(fs, name))
		}
		if f.Changed || envOverrides(f) {
			continue // the command line and the environment win over the file
		}
		if err := setFromNode(f, v); err != nil {
			return configErr(file, v, "%s: %v", name, err)
		}
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

// envOverrides reports whether the environment variable named in the flag's help is set to a
// value (the flags read these variables with os.Getenv, where empty means unset).
func envOverrides(f *pflag.Flag) bool {
	for _, m := range envInUsage.FindAllStringSubmatch(f.Usage, -1) {
		if os.Getenv(m[1]) != "" {
			return true
		}
	}
	return false
}

func configErr(file string, n *yaml.Node, format string, args ...any) error {
	return fmt.Errorf("%w %s:%d:%d: %s", ErrConfig, file, n.Line, n.Column, fmt.Sprintf(format, args...))
}

// suggestFlag names the closest flag, or lists them all when none is close.
func suggestFlag(fs *pflag.FlagSet, name string) string {
	var names []string
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
		if notFromConfig[f.Name] || f.Hidden {
			return
		}
		names = append(names, f.Name)
		if d := spelling.Distance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	sort.Strings(names)
	return "; keys are its flags: " + strings.Join(names, ", ")
}
