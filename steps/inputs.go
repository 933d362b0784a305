package steps

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prflow/prflow/pipelines/template"
)

// Helpers that read typed step inputs and name the field when the type is wrong. `static`
// means load-time validation: a value may still be an unresolved expression string.

func stringList(v any, field string) ([]string, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		if x == "" {
			return nil, nil
		}
		return strings.Split(x, ","), nil
	case []any:
		out := make([]string, 0, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s[%d]: want a string, got %T", field, i, e)
			}
			out = append(out, s)
		}
		return out, nil
	case []string:
		return x, nil
	}
	return nil, fmt.Errorf("%s: want a list of strings, got %T", field, v)
}

func intInput(v any, field string, static bool) (int, error) {
	switch x := v.(type) {
	case int:
		return x, nil
	case int64:
		return int(x), nil
	case uint64:
		return int(x), nil
	case float64:
		if x == float64(int(x)) {
			return int(x), nil
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
			return n, nil
		}
		if static && template.Contains(x) {
			return 1, nil
		}
	}
	return 0, fmt.Errorf("%s: want a whole number, got %v", field, v)
}

// prNumberInput reads the required prNumber input (a whole number above zero). Its errors
// are terminal: a retry cannot fix them.
func prNumberInput(in map[string]any) (int, error) {
	n, err := intInput(in["prNumber"], "prNumber", false)
	if err != nil {
		return 0, Terminal(err)
	}
	if n <= 0 {
		return 0, Terminalf("prNumber: required")
	}
	return n, nil
}

// BoolInput reads a boolean input that may arrive as a string ("true").
func BoolInput(in map[string]any, field string) (bool, error) {
	switch x := in[field].(type) {
	case nil:
		return false, nil
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, nil
		case "false", "":
			return false, nil
		}
	}
	return false, fmt.Errorf("%s: want true or false, got %v", field, in[field])
}

// StringInput reads a string input; numbers are formatted.
func StringInput(in map[string]any, field string) (string, error) {
	switch x := in[field].(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case int, int64, uint64:
		return fmt.Sprint(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("%s: want a string, got %T", field, in[field])
}
