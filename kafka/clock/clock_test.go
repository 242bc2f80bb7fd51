package clock

import (
	"testing"
	"time"
)

func TestFakeRunsDueFunctionsInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	c := NewFake(start)
	var got []string
	var at []time.Duration
	rec := func(name string) func() {
		return func() { got = append(got, name); at = append(at, c.Now().Sub(start)) }
	}
	c.AfterFunc(3*time.Second, rec("c"))
	c.AfterFunc(time.Second, func() {
		rec("a")()
		c.AfterFunc(time.Second, rec("b")) // armed by a due function: due at 2 s
	})
	stopped := c.AfterFunc(2500*time.Millisecond, rec("stopped"))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	c.Advance(2 * time.Second)
	if want := []string{"a", "b"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("after 2 s ran %v, want %v", got, want)
	}
	if at[0] != time.Second || at[1] != 2*time.Second {
		t.Fatalf("ran at %v, want 1s and 2s", at)
	}
	if c.Pending() != 1 {
		t.Fatalf("pending %d, want 1", c.Pending())
	}
	c.Advance(time.Second)
	if len(got) != 3 || got[2] != "c" || c.Now().Sub(start) != 3*time.Second || c.Pending() != 0 {
		t.Fatalf("ran %v at %v, pending %d", got, c.Now().Sub(start), c.Pending())
	}
}
