package main

import (
	"strings"
	"testing"
)

func TestSimSyncWindows(t *testing.T) {
	ws, err := simSyncWindows([]string{`{"kind":"deny","schedule":"0 22 * * *","duration":"8h","manualSync":true,"timeZone":"Europe/Paris"}`})
	if err != nil || len(ws) != 1 || ws[0].Kind != "deny" || !ws[0].ManualSync || ws[0].TimeZone != "Europe/Paris" {
		t.Fatalf("got %+v %v", ws, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"kind":"deny","schedule":"0 22 * * *","duration":"8h","manualsync":true}`, `unknown field "manualsync"`},
		{`{"kind":"deny","schedule":"0 22 * * *","duration":"eight hours"}`, `duration "eight hours"`},
		{`deny 0 22 * * * 8h`, "--sim-sync-window #1"},
	} {
		if _, err := simSyncWindows([]string{c.in}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
}
