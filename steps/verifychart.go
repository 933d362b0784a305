package steps

import (
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm"
)

// conditionThresholds finds the numbers `result` is compared with (result < 0.05, 0.9 <=
// result), to draw them on the chart. Comparisons with baseline or ratio have no fixed line.
func conditionThresholds(p *vm.Program) []float64 {
	var out []float64
	num := func(n ast.Node) (float64, bool) {
		neg := 1.0
		if u, ok := n.(*ast.UnaryNode); ok && u.Operator == "-" {
			neg, n = -1, u.Node
		}
		switch x := n.(type) {
		case *ast.IntegerNode:
			return neg * float64(x.Value), true
		case *ast.FloatNode:
			return neg * x.Value, true
		}
		return 0, false
	}
	isResult := func(n ast.Node) bool { id, ok := n.(*ast.IdentifierNode); return ok && id.Value == "result" }
	var walk func(n ast.Node)
	walk = func(n ast.Node) {
		b, ok := n.(*ast.BinaryNode)
		if !ok {
			if u, ok := n.(*ast.UnaryNode); ok {
				walk(u.Node)
			}
			return
		}
		switch b.Operator {
		case "<", "<=", ">", ">=", "==", "!=":
			if v, ok := num(b.Right); ok && isResult(b.Left) {
				out = append(out, v)
			} else if v, ok := num(b.Left); ok && isResult(b.Right) {
				out = append(out, v)
			}
		default:
			walk(b.Left)
			walk(b.Right)
		}
	}
	if p != nil {
		walk(p.Node())
	}
	return out
}

// Chart geometry (SVG user units).
const (
	chartW, chartH                   = 640.0, 240.0
	chartLeft, chartRight            = 64.0, 16.0
	chartTop, chartBottom            = 32.0, 40.0
	chartPlotW                       = chartW - chartLeft - chartRight
	chartPlotH                       = chartH - chartTop - chartBottom
	colorGood, colorBad, colorUnsure = "#1a7f37", "#cf222e", "#9a6700"
)

// verifyChart draws one metric as a standalone SVG document: its measurements over time
// (coloured by verdict), the baseline when there is one, the numeric thresholds of its
// conditions, and the promotion time. Every label is XML-escaped: metric names and messages
// come from the pipeline and the backend.
func verifyChart(spec metricSpec, st *metricState, start time.Time) string {
	end := start.Add(time.Duration(spec.Count) * spec.Interval)
	if n := len(st.Measurements); n > 0 && st.Measurements[n-1].At.After(end) {
		end = st.Measurements[n-1].At
	}
	// Y range over values, baselines and thresholds, padded; a flat series gets a unit band.
	var ys []float64
	for _, m := range st.Measurements {
		if m.Value != nil {
			ys = append(ys, *m.Value)
		}
		if m.Baseline != nil {
			ys = append(ys, *m.Baseline)
		}
	}
	ys = append(ys, spec.thresholds...)
	lo, hi := 0.0, 1.0
	if len(ys) > 0 {
		lo, hi = slices.Min(ys), slices.Max(ys)
		if lo > 0 && lo < hi/2 || lo == hi && lo > 0 {
			lo = 0 // rates and counts read best from zero
		}
		if hi == lo {
			hi = lo + 1
		}
		pad := (hi - lo) * 0.08
		hi += pad
		if lo != 0 {
			lo -= pad
		}
	}
	// Round the range out to a nice step (1, 2 or 5 × 10^k) so the axis reads 0, 0.05, 0.1.
	step := niceStep((hi - lo) / 4)
	lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	span := end.Sub(start)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return chartLeft + chartPlotW*float64(t.Sub(start))/float64(span) }
	y := func(v float64) float64 { return chartTop + chartPlotH*(1-(v-lo)/(hi-lo)) }

	var b strings.Builder
	esc := func(s string) string {
		var e strings.Builder
		_ = xml.EscapeText(&e, []byte(s))
		return e.String()
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	verdict := orDefault(st.Verdict, "measuring")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" font-family="sans-serif" font-size="11">`,
		int(chartW), int(chartH), int(chartW), int(chartH))
	title := fmt.Sprintf("%s: %s (%d/%d measurements)", spec.Name, verdict, len(st.Measurements), spec.Count)
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`)
	fmt.Fprintf(&b, `<text x="%s" y="18" font-size="13" font-weight="bold">%s</text>`, f(chartLeft), esc(title))
	// Axes and y labels.
	fmt.Fprintf(&b, `<g stroke="#d0d7de" stroke-width="1"><line x1="%s" y1="%s" x2="%s" y2="%s"/><line x1="%s" y1="%s" x2="%s" y2="%s"/></g>`,
		f(chartLeft), f(chartTop), f(chartLeft), f(chartTop+chartPlotH), f(chartLeft), f(chartTop+chartPlotH), f(chartLeft+chartPlotW), f(chartTop+chartPlotH))
	for i := 0; lo+float64(i)*step <= hi+step/2; i++ {
		v := lo + float64(i)*step
		if i > 0 {
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#eaeef2"/>`, f(chartLeft), f(y(v)), f(chartLeft+chartPlotW), f(y(v)))
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end" fill="#57606a">%s</text>`, f(chartLeft-6), f(y(v)+4), esc(chartNum(math.Round(v/step)*step)))
	}
	fmt.Fprintf(&b, `<text x="%s" y="%s" fill="#57606a">%s</text>`, f(chartLeft), f(chartH-8), esc(start.UTC().Format(time.TimeOnly)))
	fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end" fill="#57606a">%s</text>`, f(chartLeft+chartPlotW), f(chartH-8), esc(end.UTC().Format(time.TimeOnly)+" UTC"))
	// Thresholds.
	for _, t := range spec.thresholds {
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-dasharray="6 4"/>`, f(chartLeft), f(y(t)), f(chartLeft+chartPlotW), f(y(t)), colorBad)
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="end" fill="%s">%s</text>`, f(chartLeft+chartPlotW), f(y(t)-3), colorBad, esc("threshold "+chartNum(t)))
	}
	// The promotion.
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#0969da" stroke-width="2"/>`, f(x(start)), f(chartTop), f(x(start)), f(chartTop+chartPlotH))
	fmt.Fprintf(&b, `<text x="%s" y="%s" fill="#0969da">%s</text>`, f(x(start)+4), f(chartTop+12), esc("promoted "+start.UTC().Format(time.TimeOnly)))
	// Baseline and values.
	line := func(pick func(Measurement) *float64, attrs string) {
		var pts []string
		for _, m := range st.Measurements {
			if v := pick(m); v != nil {
				pts = append(pts, f(x(m.At))+","+f(y(*v)))
			}
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" %s points="%s"/>`, attrs, strings.Join(pts, " "))
		}
	}
	if spec.Baseline {
		fmt.Fprintf(&b, `<text x="%s" y="18" text-anchor="end" fill="#57606a">%s</text>`, f(chartLeft+chartPlotW), esc("dotted: baseline (same window before the promotion)"))
	}
	line(func(m Measurement) *float64 { return m.Baseline }, `stroke="#8c959f" stroke-dasharray="3 3"`)
	line(func(m Measurement) *float64 { return m.Value }, `stroke="#24292f" stroke-width="1.5"`)
	for _, m := range st.Measurements {
		color := map[string]string{verdictSuccessful: colorGood, verdictFailed: colorBad}[m.Verdict]
		if color == "" {
			color = colorUnsure
		}
		cy := chartTop + chartPlotH // no value: on the axis
		label := m.At.UTC().Format(time.TimeOnly) + " " + m.Verdict
		if m.Value != nil {
			cy = y(*m.Value)
			label += " value " + chartNum(*m.Value)
		}
		if m.Baseline != nil {
			label += " baseline " + chartNum(*m.Baseline)
		}
		if m.Message != "" {
			label += ": " + m.Message
		}
		fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="4" fill="%s"><title>%s</title></circle>`, f(x(m.At)), f(cy), color, esc(label))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// niceStep is the smallest of 1, 2 or 5 × 10^k that is at least raw (raw > 0).
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func chartNum(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }
