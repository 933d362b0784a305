package docs

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prflow/prflow/pipelines"
	"github.com/prflow/prflow/steps"
)

// The checked-in reference pages are what the generators make of today's code.
func TestGeneratedPagesAreCurrent(t *testing.T) {
	ref, err := PipelineReference(pipelines.Schema)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"pipeline-reference.md": ref, "steps.md": StepReference(steps.Default)} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v (generate it with %s)", err, Command)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("docs/%s is stale (the step inputs or the pipeline schema changed): regenerate it with %s", name, Command)
		}
	}
}

// Every step type a pipeline may name, and every one of its inputs, is in steps.md.
func TestStepReferenceListsEveryInput(t *testing.T) {
	page := string(StepReference(steps.Default))
	n := 0
	for _, typ := range steps.Default.Types() {
		d, _ := steps.Default.Lookup(typ)
		_, body, found := strings.Cut(page, "\n## "+typ+"\n")
		if d.Internal {
			if found {
				t.Errorf("internal step type %s is in the reference", typ)
			}
			continue
		}
		if !found {
			t.Errorf("step type %s is missing", typ)
			continue
		}
		body, _, _ = strings.Cut(body, "\n## ")
		for _, in := range d.Inputs {
			n++
			if !strings.Contains(body, "| `"+in.Name+"` |") {
				t.Errorf("%s: input %s is missing", typ, in.Name)
			}
		}
	}
	if n == 0 {
		t.Fatal("no inputs found: the registry is empty")
	}
}

var (
	mdLink  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`^#{1,6} (.*)$`)
	anchor  = regexp.MustCompile(`<a id="([^"]+)">`)
)

// Every relative link in README.md and docs/*.md reaches a file, and a #fragment a heading
// (or an <a id>) of that file.
func TestLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("*.md")
	pages = append(pages, filepath.Join("..", "README.md"))
	if len(pages) < 3 {
		t.Fatalf("pages: %v", pages)
	}
	checked := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range outsideCode(string(src)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: %v", page, i+1, target, err)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %s: a fragment on a file that is not Markdown", page, i+1, target)
					continue
				}
				if anchors, err := anchorsOf(path); err != nil || !anchors[frag] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s (%v)", page, i+1, target, path, frag, err)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links checked: the link pattern no longer matches", checked)
	}
}

// A link check must catch a broken link, a missing file and a missing fragment.
func TestLinkCheckFindsBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte("# Title A\n\n## Some: part, two\n\n```\n# not a heading\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := anchorsOf(filepath.Join(dir, "a.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !got["title-a"] || !got["some-part-two"] || got["not-a-heading"] {
		t.Errorf("anchors %v", got)
	}
	if _, err := anchorsOf(filepath.Join(dir, "missing.md")); err == nil {
		t.Error("a missing file has anchors")
	}
	if lines := outsideCode("x [a](b.md)\n```\n[c](d.md)\n```\n"); mdLink.MatchString(lines[2]) || !mdLink.MatchString(lines[0]) {
		t.Errorf("links inside code blocks are checked, or others are not: %q", lines)
	}
}

// outsideCode returns the page's lines with the lines of fenced code blocks blanked.
func outsideCode(src string) []string {
	lines := strings.Split(src, "\n")
	fence := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			fence = !fence
			lines[i] = ""
		} else if fence {
			lines[i] = ""
		}
	}
	return lines
}

func anchorsOf(path string) (map[string]bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range outsideCode(string(src)) {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			// GitHub numbers a repeated heading's anchor: -1, -2, …
			for n, base := 1, s; out[s]; n++ {
				s = base + "-" + strconv.Itoa(n)
			}
			out[s] = true
		}
		for _, m := range anchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out, nil
}
