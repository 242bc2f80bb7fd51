package retry

import (
	"context"
	"testing"
	"time"
)

// TestDelayFollowsTheRule: every wait lies in [nominal/2, nominal] with
// the nominal wait doubling from Initial and capped at Max, and the draws
// spread (jitter is real).
func TestDelayFollowsTheRule(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	nominal := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, n := range nominal {
		n *= time.Millisecond
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(i + 1)
			if d < n/2 || d > n {
				t.Fatalf("Delay(%d) = %v, want in [%v, %v]", i+1, d, n/2, n)
			}
			seen[d] = true
		}
		if len(seen) < 20 {
			t.Errorf("Delay(%d): only %d distinct waits in 200 draws", i+1, len(seen))
		}
	}
	if d := p.Delay(1 << 30); d < p.Max/2 || d > p.Max {
		t.Errorf("Delay(2^30) = %v, want in [%v, %v]", d, p.Max/2, p.Max)
	}
}

// TestBackoffNextAndReset: the stateful form follows the same rule and
// Reset starts over.
func TestBackoffNextAndReset(t *testing.T) {
	b := Policy{Initial: 10 * time.Millisecond, Max: 40 * time.Millisecond}.Backoff()
	for i, n := range []time.Duration{10, 20, 40, 40} {
		n *= time.Millisecond
		if d := b.Next(); d < n/2 || d > n {
			t.Errorf("wait %d = %v, want in [%v, %v]", i, d, n/2, n)
		}
	}
	b.Reset()
	if d := b.Next(); d < 5*time.Millisecond || d > 10*time.Millisecond {
		t.Errorf("first wait after Reset = %v, want in [5ms, 10ms]", d)
	}
}

func TestZeroPolicy(t *testing.T) {
	if d := (Policy{}).Delay(3); d <= 0 || d > time.Millisecond {
		t.Errorf("zero policy: Delay(3) = %v, want in (0, 1ms]", d)
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Errorf("Sleep on a cancelled context = %v", err)
	}
	if err := Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("Sleep = %v", err)
	}
}
