package spelling

import "testing"

func TestDistanceAndClosest(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"filePath", "filepath", 1}, {"same", "same", 0}} {
		if got := Distance(c.a, c.b); got != c.d {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	known := []string{"connector", "filePath", "variables", "mergeStrategy"}
	for in, want := range map[string]string{"conector": "connector", "FILEPATH": "filePath", "mergeStratgey": "mergeStrategy", "timeout": "", "": ""} {
		if got := Closest(in, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}
