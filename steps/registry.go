package steps

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
)

// Definition describes a step type to the registry.
type Definition struct {
	Type string
	// Aliases are other names that load as this type (Harness names such as GitOpsSync).
	Aliases []string
	// Inputs declares every key `with:` may hold (steps/inputs.go); nil declares nothing and
	// takes any key (test doubles only: every built-in type declares). Pipeline load refuses
	// other keys and literal values of the wrong type; the JSON Schema is generated from it.
	Inputs []Input
	// Config is a zero value of the step's config struct (steps/config.go); Register derives
	// Inputs from its tags, and the step reads its inputs with Decode into the same type.
	Config any
	// check is the step's own Validate once Register wrapped it (wrapped) in the decoding
	// of Config.
	check   func(inputs map[string]any) error
	wrapped bool
	// Internal step types are run by the controller itself (commit statuses, PR comments,
	// trigger path checks, stage gates): a pipeline cannot name them, and the schema omits them.
	Internal bool
	// Validate checks what declarations cannot say (one of two inputs required, cross-field
	// rules), at pipeline load after the declared inputs passed (values containing expressions
	// are not resolved yet and are passed as strings). Errors should name the field.
	Validate func(inputs map[string]any) error
	New      func() Step
	// Pool is the default worker pool when the pipeline does not set one.
	Pool string
	// PerTarget names inputs evaluated once per target cluster of the stage's environment
	// (with env, cluster and envgroup set to that target); the step gets them as
	// inputs["targets"] = [{env, cluster, envgroup, <field>: value}, …] instead of top-level.
	PerTarget []string
	// Parks marks a step that parks or waits (MergePR, Approval, GitOpsSync). Its deliveries
	// lost with a dead worker are not held against it like a crash loop: when they run out,
	// the controller dispatches the job again, a bounded number of times.
	Parks bool
	// JudgesAtDeadline marks a step that, woken with WakeReason "deadline", only reads what it
	// waits on and gives its verdict (GitOpsSync: no new sync, and an outage fails without
	// rollback). When the deadline cuts one of its runs short, the worker asks it for that
	// verdict instead of failing it with the bare timeout.
	JudgesAtDeadline bool
	// Pure marks a step whose run changes nothing outside its result: it reads its inputs and
	// the run's signals, calls nothing and writes nothing (Approval). Its jobs take no
	// execution lease (steps/worker): two deliveries running at once return the same result,
	// and the controller applies one.
	Pure bool
	// Priors names the step types of earlier steps of its stage that the step reads
	// (Context.Priors); its jobs carry only those, so a job does not grow with every output
	// the stage produced before it. Nil declares nothing and gets every earlier step (custom
	// types written before this field); NoPriors reads none. A built-in type declares exactly
	// what its code reads (TestPriorsDeclaredMatchCode).
	Priors []string
}

// NoPriors is the Priors of a step type that reads no earlier step.
var NoPriors = []string{}

// Registry maps step type names to implementations.
type Registry struct {
	mu    sync.RWMutex
	defs  map[string]*Definition
	alias map[string]string
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{defs: map[string]*Definition{}, alias: map[string]string{}}
}

// Default is the registry step files register with from init.
var Default = NewRegistry()

// Register adds a step type; registering a name twice is a programming error and panics.
func (r *Registry) Register(d Definition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range append([]string{d.Type}, d.Aliases...) {
		if _, dup := r.alias[n]; dup {
			panic(fmt.Sprintf("steps: type %q registered twice", n))
		}
		r.alias[n] = d.Type
	}
	if d.Config != nil {
		t := reflect.TypeOf(d.Config)
		derived := inputsOfType(t)
		// A Definition looked up and registered again (into another registry) holds the
		// derived inputs and the wrapped Validate already.
		if d.Inputs != nil && !reflect.DeepEqual(d.Inputs, derived) {
			panic(fmt.Sprintf("steps: type %q declares both Inputs and Config", d.Type))
		}
		d.Inputs = derived
		if !d.wrapped {
			d.wrapped, d.check = true, d.Validate
		}
		check := d.check
		// At load the whole config is decoded too: enums, durations, selectors, nested
		// objects are refused there, not when the step runs.
		d.Validate = func(in map[string]any) error {
			if err := decodeStruct(reflect.New(t).Elem(), in, "", true); err != nil {
				return err
			}
			if check != nil {
				return check(in)
			}
			return nil
		}
	}
	if err := checkDecl(d.Inputs, d.Type); err != nil {
		panic("steps: " + err.Error())
	}
	for i, t := range d.Priors {
		if t == "" || slices.Contains(d.Priors[:i], t) {
			panic(fmt.Sprintf("steps: type %q: Priors names %q empty or twice", d.Type, t))
		}
	}
	dd := d
	r.defs[d.Type] = &dd
}

// Register adds a step type to the Default registry.
func Register(d Definition) { Default.Register(d) }

// Lookup finds a step type by name or alias.
func (r *Registry) Lookup(name string) (*Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.alias[name]
	if !ok {
		return nil, false
	}
	return r.defs[t], true
}

// Types lists the canonical type names, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.defs))
	for t := range r.defs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// checkDecl catches declaration mistakes at registration: duplicate or empty names, unknown
// types, objects without fields.
func checkDecl(list []Input, where string) error {
	seen := map[string]bool{}
	for _, in := range list {
		if in.Name == "" || seen[in.Name] {
			return fmt.Errorf("%s: input %q declared twice or without a name", where, in.Name)
		}
		seen[in.Name] = true
		if err := checkInputDecl(in, where+"."+in.Name); err != nil {
			return err
		}
	}
	return nil
}

func checkInputDecl(in Input, where string) error {
	switch in.Type {
	case InputString, InputBool, InputInt, InputDuration, InputStrings, InputMap, InputList, InputAny:
	case InputObject:
		if err := checkDecl(in.Fields, where); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s: unknown input type %q", where, in.Type)
	}
	if in.Type == InputList && in.Items == nil {
		return fmt.Errorf("%s: a list input declares its Items", where)
	}
	if in.Items != nil {
		if err := checkInputDecl(*in.Items, where+"[]"); err != nil {
			return err
		}
	}
	for _, o := range in.Or {
		if err := checkInputDecl(o, where); err != nil {
			return err
		}
	}
	return nil
}
