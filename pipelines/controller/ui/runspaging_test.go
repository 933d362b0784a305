package ui_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/prflow/prflow/pipelines/controller/ctltest"
)

// TestBrowserRunsPaging: the runs page shows PageSize runs newest first with an "Older" link;
// a run started after the first page loaded does not push a run onto the next page twice, the
// second page holds exactly the rest, and "Newest" leads back. A run waiting for an approval
// is on top of the first page and in no later page. Checked at 1400 and 400 px (no sideways
// scrolling, the Older link on screen width).
func TestBrowserRunsPaging(t *testing.T) {
	t.Parallel()
	e := newUIEnv(t, ctltest.Options{}, nil)
	e.RegisterAgent("sim")
	gated := startParked(t, e, promotePipeline, "prod", "approve")
	var ids []string // oldest first
	for range 30 {
		r := e.Start("name: paged\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n", nil)
		ids = append(ids, r.ID)
	}
	ctx := signedInTab(t, e.URL+"/ui/", bobToken)
	for _, size := range []struct {
		name string
		w, h int64
	}{{"runs-paging-1400", 1400, 900}, {"runs-paging-400", 400, 800}} {
		run(t, ctx, "first page "+size.name, chromedp.EmulateViewport(size.w, size.h), chromedp.Navigate(e.URL+"/ui/"),
			chromedp.WaitVisible(`a[rel=next]`, chromedp.ByQuery))
		var first []string
		run(t, ctx, "rows", chromedp.Evaluate(`Array.from(document.querySelectorAll('#runs tbody tr')).map(r=>r.dataset.run)`, &first))
		newest := slices.Clone(ids)
		slices.Reverse(newest)
		// The approval on top, then the 25 newest others.
		if want := append([]string{gated.ID}, newest[:25]...); strings.Join(first, " ") != strings.Join(want, " ") {
			t.Fatalf("%s: first page %v, want %v", size.name, first, want)
		}
		var fits bool
		run(t, ctx, "fits", chromedp.Evaluate(`(function(){var a=document.querySelector('a[rel=next]').getBoundingClientRect();
			return a.right<=window.innerWidth && document.documentElement.scrollWidth<=window.innerWidth})()`, &fits))
		if !fits {
			t.Errorf("%s: the Older link is off screen or the page scrolls sideways", size.name)
		}
		shot(t, ctx, size.name)
		// A run starting now is newer than everything listed: the next page is still the rest.
		late := e.Start("name: late\nstages:\n  - id: s\n    steps:\n      - {id: w, type: Wait, with: {duration: 10m}}\n", nil)
		run(t, ctx, "older", chromedp.Click(`a[rel=next]`, chromedp.ByQuery), chromedp.WaitVisible(`a[rel=first]`, chromedp.ByQuery))
		var second []string
		run(t, ctx, "rows 2", chromedp.Evaluate(`Array.from(document.querySelectorAll('#runs tbody tr')).map(r=>r.dataset.run)`, &second))
		if want := newest[25:]; strings.Join(second, " ") != strings.Join(want, " ") {
			t.Errorf("%s: second page %v, want %v (no run twice, none skipped, no approval again)", size.name, second, want)
		}
		var older int
		run(t, ctx, "no older", chromedp.Evaluate(`document.querySelectorAll('a[rel=next]').length`, &older))
		if older != 0 {
			t.Errorf("%s: the last page links an older one", size.name)
		}
		shot(t, ctx, size.name+"-older")
		run(t, ctx, "newest", chromedp.Click(`a[rel=first]`, chromedp.ByQuery), chromedp.WaitVisible(`tr[data-run="`+late.ID+`"]`, chromedp.ByQuery))
		ids = append(ids, late.ID)
	}
	run(t, ctx, "reset viewport", chromedp.EmulateViewport(1400, 900))
}
