package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConvert: any input gives a result or an error, never a panic, and whatever converts
// cleanly loads with the native loader (Convert loads it).
func FuzzConvert(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(fill(base, map[string]string{"STEP": "strategy: {matrix: {a: [1, 2], exclude: [{a: 1}]}}"})))
	m, err := LoadMap("testdata/map.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		res, err := Convert("f.yaml", src, Options{Map: m, Inputs: map[string]any{"apps": "a,b"}})
		if err == nil && (res == nil || res.Pipeline == nil) {
			t.Fatalf("no error and no pipeline")
		}
		_, _ = ParseMap("m.yaml", src)
	})
}
