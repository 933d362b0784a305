package harness

import (
	"os"
	"testing"
)

func TestDump(t *testing.T) {
	m, err := LoadMap("testdata/map.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile(os.Getenv("F"))
	res, err := Convert(os.Getenv("F"), src, Options{Map: m, Inputs: map[string]any{"tag": "1.2.3", "apps": "a,b"}})
	if res != nil {
		t.Logf("\n%s\nwarn %v", res.Native, res.Warnings)
	}
	if err != nil {
		t.Fatal(err)
	}
}
