package scm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func sha(i int) string { return fmt.Sprintf("%040x", i) }

func TestCheckAncestryArgs(t *testing.T) {
	cases := []struct {
		a, d    string
		wantErr string
	}{
		{sha(1), sha(2), ""},
		{strings.ToUpper(sha(0xabc)), sha(2), ""},
		{strings.Repeat("a", 64), sha(2), ""},
		{"main", sha(2), `ancestor "main" is not a full commit SHA`},
		{sha(1), "abc1234", `descendant "abc1234" is not a full commit SHA`},
		{sha(1), "", `descendant "" is not a full commit SHA`},
		{strings.Repeat("g", 40), sha(2), "ancestor"},
	}
	for _, c := range cases {
		a, d, err := CheckAncestryArgs(c.a, c.d)
		if c.wantErr == "" {
			if err != nil || a != strings.ToLower(c.a) || d != c.d {
				t.Errorf("CheckAncestryArgs(%q, %q) = %q, %q, %v", c.a, c.d, a, d, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("CheckAncestryArgs(%q, %q): error %v, want %q", c.a, c.d, err, c.wantErr)
		}
	}
}

func TestAncestryCache(t *testing.T) {
	ctx := context.Background()
	var c AncestryCache
	c.Max = 3
	calls := 0
	answer := func(yes bool, err error) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) { calls++; return yes, err }
	}
	// Equal commits need no call.
	if yes, err := c.Lookup(ctx, "r", sha(1), sha(1), answer(false, nil)); !yes || err != nil || calls != 0 {
		t.Fatalf("equal: %v %v, %d calls", yes, err, calls)
	}
	// Errors are not kept: the next lookup asks again.
	boom := errors.New("boom")
	if _, err := c.Lookup(ctx, "r", sha(1), sha(2), answer(true, boom)); !errors.Is(err, boom) {
		t.Fatalf("error: %v", err)
	}
	if yes, err := c.Lookup(ctx, "r", sha(1), sha(2), answer(true, nil)); !yes || err != nil || calls != 2 {
		t.Fatalf("after error: %v %v, %d calls", yes, err, calls)
	}
	// Both answers are kept, per repo and per direction.
	if yes, _ := c.Lookup(ctx, "r", sha(2), sha(1), answer(false, nil)); yes {
		t.Fatal("reverse direction answered from the forward entry")
	}
	if yes, _ := c.Lookup(ctx, "other", sha(1), sha(2), answer(false, nil)); yes {
		t.Fatal("another repo answered from this repo's entry")
	}
	if calls != 4 {
		t.Fatalf("%d calls, want 4", calls)
	}
	if yes, _ := c.Lookup(ctx, "r", sha(2), sha(1), answer(true, nil)); yes || calls != 4 {
		t.Fatalf("cached false not used: %v, %d calls", yes, calls)
	}
	// Bounded: a fourth pair evicts the least recently used (r 1→2; r 2→1 was just used).
	c.Lookup(ctx, "r", sha(3), sha(4), answer(true, nil))
	if c.Len() != 3 {
		t.Fatalf("%d entries, want 3", c.Len())
	}
	before := calls
	c.Lookup(ctx, "r", sha(1), sha(2), answer(true, nil))
	if calls != before+1 {
		t.Fatal("the least recently used entry was not evicted")
	}
}

func TestAncestryCacheConcurrent(t *testing.T) {
	var c AncestryCache
	c.Max = 50
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				a, d := sha(i%80), sha(i%80+1+g%2)
				yes, err := c.Lookup(context.Background(), "r", a, d, func(context.Context) (bool, error) {
					calls.Add(1)
					return g%2 == 0, nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				_ = yes
			}
		})
	}
	wg.Wait()
	if c.Len() > 50 {
		t.Fatalf("%d entries kept, bound is 50", c.Len())
	}
	if calls.Load() == 0 {
		t.Fatal("no lookups asked")
	}
}
