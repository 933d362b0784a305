package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/prflow/prflow/pipelines/harness"
	"github.com/prflow/prflow/steps"
)

// harnessFlags are the flags of every command that reads Harness pipeline YAML.
type harnessFlags struct {
	mapFile string
	allow   bool
	loaded  bool // the map file was read (once per command: validate converts many files)
	m       *harness.Map
	mapErr  error
}

func (h *harnessFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&h.mapFile, "harness-map", "", "mapping file for Harness pipelines: services, environments and GitOps clusters")
	cmd.Flags().BoolVar(&h.allow, "allow-unsupported", false, "Harness pipelines: leave out unsupported constructs with a warning instead of failing")
}

// load reads the mapping file; nil when none was given.
func (h *harnessFlags) load() (*harness.Map, error) {
	if h.mapFile == "" {
		return nil, nil
	}
	if !h.loaded {
		h.m, h.mapErr = harness.LoadMap(h.mapFile)
		h.loaded = true
	}
	return h.m, h.mapErr
}

// isMapErr reports whether err is the mapping file's own error.
func (h *harnessFlags) isMapErr(err error) bool { return h.mapErr != nil && err == h.mapErr }

// convert turns a Harness source into native YAML (printing warnings to w); native sources
// pass through unchanged.
func (h *harnessFlags) convert(file string, src []byte, inputs map[string]any, validate bool, w io.Writer) ([]byte, error) {
	if !harness.IsHarness(src) {
		return src, nil
	}
	m, err := h.load()
	if err != nil {
		return nil, err
	}
	res, err := harness.Convert(file, src, harness.Options{Map: m, Inputs: inputs, AllowUnsupported: h.allow, Registry: steps.Default, Validate: validate})
	if res != nil {
		for _, wn := range res.Warnings {
			fmt.Fprintln(w, "warning:", wn.Error())
		}
	}
	if err != nil {
		return nil, err
	}
	return res.Native, nil
}

func newImport(*globals) *cobra.Command {
	imp := &cobra.Command{Use: "import", Short: "Convert pipelines from other tools into prflow YAML"}
	var hf harnessFlags
	var sets []string
	cmd := &cobra.Command{
		Use:   "harness FILE",
		Short: "Print the native prflow pipeline for a Harness PR pipeline",
		Long: "Converts a Harness pipeline (root `pipeline:`) with a mapping file (--harness-map) into native\n" +
			"prflow YAML on stdout. Matrix axes over runtime inputs expand with the --set values.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if !harness.IsHarness(src) {
				return fmt.Errorf("%s: not a Harness pipeline (no root key `pipeline:`)", args[0])
			}
			inputs, err := parseSets(sets)
			if err != nil {
				return err
			}
			native, err := hf.convert(args[0], src, inputs, false, cmd.ErrOrStderr())
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return exitError{code: 1, msg: args[0] + ": cannot be converted"}
			}
			_, err = cmd.OutOrStdout().Write(native)
			return err
		},
	}
	hf.add(cmd)
	cmd.Flags().StringArrayVar(&sets, "set", nil, "runtime input key=value (repeatable)")
	imp.AddCommand(cmd)
	return imp
}
