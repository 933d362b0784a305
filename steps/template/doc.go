// Package template compiles and evaluates the expressions embedded in
// pipeline YAML strings.
//
// # Syntax
//
// Two delimiters are accepted and mean the same thing:
//
//	${{ expr }}   native
//	<+ expr >     Harness
//
// A string is one of:
//
//   - a literal: no expression; Eval returns the (unescaped) string;
//   - a whole expression: the string is exactly one delimited expression;
//     Eval returns the typed value (int, float64, bool, []any, map[string]any, ...);
//   - mixed text: Eval returns a string; values are formatted by [Format]
//     (integers without ".0", maps and lists as compact JSON, nil is an error).
//
// Expressions are github.com/expr-lang/expr expressions with three changes:
//
//   - Lookups are strict. Reading a variable or map key that does not exist,
//     indexing past the end of a list or reading a field of nil is an error that
//     names the full path and the keys that do exist. Inside the left operand of
//     ?? and after ?. a missing key or nil value yields nil instead.
//   - Harness string methods work on values: split, contains, toLowerCase,
//     toUpperCase, startsWith, endsWith, replace, trim, length, equals,
//     substring, indexOf, concat. Other method calls are compile errors.
//   - Any identifier can be a variable root, including names expr treats
//     specially (env, map, len, trim, all, now, ...), as long as it is not
//     immediately followed by "(".
//
// # Delimiter rules
//
// The closing "}}" of ${{ and the closing ">" of <+ are found outside quoted
// strings ('...', "...", `...`) and outside brackets. Inside <+ ... > the first
// such ">" closes the expression, so a comparison inside one <+ > must be
// bracketed: <+ (x > 3) >. In a condition, each <+ ... > is an operand:
// <+a.b> > 3 works. Delimiters may nest (<+<+a.b>.split(",")>): the inner one
// acts as a parenthesised operand. A delimiter inside a quoted string inside an
// expression or condition is an error (it would never be evaluated).
//
// # Escaping
//
// In template text a backslash before an opening delimiter makes it literal:
// \${{ x }} yields "${{ x }}" and \<+x> yields "<+x>". Before a delimiter a run
// of backslashes is halved and an odd run escapes it (\\${{ x }} yields a
// backslash followed by the value of x). Backslashes anywhere else are kept
// as they are. (In a YAML double-quoted scalar the backslash itself must be
// doubled: "\\${{ x }}"; plain and single-quoted scalars need no extra escaping.)
//
// # Limits
//
// Every template is compiled with a node limit (WithMaxNodes, shared by all
// its expressions) and every expression is evaluated with a memory budget
// (WithMemoryBudget). Besides expr's own accounting (ranges, literals), the
// budget counts the bytes of strings built by +, methods and string
// builtins, the deep size (list elements and map entries) of every list or
// map built, the iterations of predicate builtins (all, map, filter, ...) and
// the elements visited by ==, != and in on lists and maps. Values whose size
// can explode (repeat, join, replace, concat, flatten, toJSON, string, uniq)
// are sized before they are allocated, so values shared through let or #acc
// cannot grow exponentially. Exceeding the budget is ErrMemoryBudget.
// Evaluation checks the context before each expression and every few dozen
// lookups; scanning a large string inside a long loop is bounded only by the
// budget times the string's length, so callers should pass a deadline.
//
// # Errors
//
// Compile and evaluation errors are *Error values carrying the byte offset of
// the failing expression (Offset, its opening delimiter; in a condition, the
// failing <+...> operand) and of the failing token or lookup path (Pos). The
// cause is matchable with errors.Is: ErrMissing, ErrNil, ErrNotBool,
// ErrRuntimeInput, ErrMemoryBudget, ErrMaxNodes, ErrSyntax, or the context's
// error.
//
// # Where it lives
//
// The pipeline loader (pipelines) compiles expressions and the steps evaluate their inputs
// with them, so the package sits under steps, the lower of the two layers: a layer imports
// only its own layer or lower ones (cmd → pipelines → steps → deploy/scm → queue). It
// imports nothing of prflow.
package template
