package syncwindow

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Thursday 26 November 2026.
func at(hhmm string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", "2026-11-26 "+hhmm)
	if err != nil {
		panic(err)
	}
	return t
}

func day(d int, hhmm string) time.Time { return at(hhmm).AddDate(0, 0, d) }

func TestEvaluate(t *testing.T) {
	night := Window{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h"}
	office := Window{Kind: "allow", Schedule: "0 9 * * 1-5", Duration: "8h"}
	lunch := Window{Kind: "deny", Schedule: "0 12 * * *", Duration: "1h"}
	day8to18 := Window{Kind: "allow", Schedule: "0 8 * * *", Duration: "10h"}
	for _, c := range []struct {
		name       string
		windows    []Window
		now        time.Time
		blocked    bool
		manual     bool
		until      time.Time
		activeKind []string
	}{
		{"deny window active", []Window{night}, at("23:00"), true, false, day(1, "06:00"), []string{"deny"}},
		{"deny window not active", []Window{night}, at("12:00"), false, true, time.Time{}, nil},
		{"deny just before it starts", []Window{night}, at("21:59"), false, true, time.Time{}, nil},
		{"allow windows, none active: blocked until the next opens", []Window{office}, at("18:00"), true, false, day(1, "09:00"), nil},
		{"allow window active", []Window{office}, at("10:00"), false, true, time.Time{}, []string{"allow"}},
		{"allow window on weekdays only: Saturday waits for Monday", []Window{office}, day(2, "10:00"), true, false, day(4, "09:00"), nil},
		{"deny wins over an active allow window", []Window{day8to18, lunch}, at("12:30"), true, false, at("13:00"), []string{"allow", "deny"}},
		{"after the deny window the allow window still has to be open", []Window{lunch, {Kind: "allow", Schedule: "0 14 * * *", Duration: "1h"}},
			at("12:30"), true, false, at("14:00"), []string{"deny"}},
		{"manualSync on the active deny window", []Window{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", ManualSync: true}},
			at("23:00"), true, true, day(1, "06:00"), []string{"deny"}},
		{"manualSync needs every active deny window to allow it", []Window{
			{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", ManualSync: true},
			{Kind: "deny", Schedule: "0 23 * * *", Duration: "1h"}},
			at("23:30"), true, false, day(1, "06:00"), []string{"deny", "deny"}},
		{"manualSync on every allow window lets a manual sync through outside them",
			[]Window{{Kind: "allow", Schedule: "0 9 * * 1-5", Duration: "8h", ManualSync: true}},
			at("18:00"), true, true, day(1, "09:00"), nil},
		{"time zone: 22:00 in Paris is 21:00 UTC in winter",
			[]Window{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", TimeZone: "Europe/Paris"}},
			at("21:30"), true, false, day(1, "05:00"), []string{"deny"}},
		{"overlapping occurrences: the block lasts until the last one ends",
			[]Window{{Kind: "deny", Schedule: "0 * * * *", Duration: "90m"}}, at("12:30"), true, false, time.Time{}, []string{"deny"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Evaluate(c.windows, c.now)
			if got == nil {
				t.Fatal("nil state for windows")
			}
			if got.Error != "" || got.Blocked != c.blocked || got.ManualSync != c.manual || !got.Until.Equal(c.until) {
				t.Fatalf("got blocked=%v manual=%v until=%s err=%q; want blocked=%v manual=%v until=%s",
					got.Blocked, got.ManualSync, got.Until, got.Error, c.blocked, c.manual, c.until)
			}
			var active []string
			for _, w := range got.Windows {
				if w.Active {
					active = append(active, w.Kind)
				}
			}
			if strings.Join(active, ",") != strings.Join(c.activeKind, ",") {
				t.Fatalf("active windows %v, want %v", active, c.activeKind)
			}
			if c.blocked && !c.until.IsZero() && got.Describe() != "blocked by sync window until "+c.until.UTC().Format(time.RFC3339) {
				t.Fatalf("Describe() = %q", got.Describe())
			}
		})
	}
}

func TestEvaluateNoWindows(t *testing.T) {
	if got := Evaluate(nil, at("12:00")); got != nil {
		t.Fatalf("no windows: %+v, want nil", got)
	}
}

func TestEvaluateNeverOpens(t *testing.T) {
	got := Evaluate([]Window{{Kind: "allow", Schedule: "0 0 30 2 *", Duration: "1h"}}, at("12:00"))
	if !got.Blocked || !got.Until.IsZero() || !strings.Contains(got.Describe(), "does not open within a year") {
		t.Fatalf("allow window on 30 February: %+v (%s)", got, got.Describe())
	}
}

func TestEvaluateInvalidWindowBlocksAndSaysWhich(t *testing.T) {
	for _, c := range []struct {
		w    Window
		want string
	}{
		{Window{Kind: "block", Schedule: "0 22 * * *", Duration: "8h"}, `kind "block": want allow or deny`},
		{Window{Kind: "deny", Schedule: "61 22 * * *", Duration: "8h"}, `schedule "61 22 * * *"`},
		{Window{Kind: "deny", Schedule: "@daily", Duration: "8h"}, `schedule "@daily"`},
		{Window{Kind: "deny", Schedule: "0 22 * * *", Duration: "8 hours"}, `duration "8 hours"`},
		{Window{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", TimeZone: "Mars/Olympus"}, `timeZone "Mars/Olympus"`},
	} {
		got := Evaluate([]Window{c.w}, at("12:00"))
		if !got.Blocked || got.ManualSync || !strings.Contains(got.Error, c.want) {
			t.Errorf("%+v: %+v, want blocked with error naming %s", c.w, got, c.want)
		}
		if err := Parse(c.w); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%+v) = %v, want ErrInvalid", c.w, err)
		}
	}
}

func TestNextChange(t *testing.T) {
	ws := []Window{{Kind: "deny", Schedule: "0 22 * * *", Duration: "8h"}, {Kind: "deny", Schedule: "0 12 * * *", Duration: "1h"}}
	for _, c := range []struct{ now, want time.Time }{
		{at("10:00"), at("12:00")},
		{at("12:30"), at("13:00")},
		{at("23:00"), day(1, "06:00")},
	} {
		if got := NextChange(ws, c.now); !got.Equal(c.want) {
			t.Errorf("NextChange at %s = %s, want %s", c.now, got, c.want)
		}
	}
	if got := NextChange([]Window{{Kind: "deny", Schedule: "nope", Duration: "1h"}}, at("10:00")); !got.IsZero() {
		t.Errorf("invalid window: NextChange = %s, want zero", got)
	}
}
