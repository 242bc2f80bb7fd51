package node

import (
	"context"
	"testing"
	"time"
)

// TestAppendBudgetWaitsForRelease: an acquire over the budget waits until
// enough bytes are released, and gives up after maxWait or when its
// context ends.
func TestAppendBudgetWaitsForRelease(t *testing.T) {
	b := newAppendBudget(10, 10)
	if !b.acquire(context.Background(), 6) {
		t.Fatal("6 of 10 bytes: refused")
	}
	got := make(chan bool)
	go func() { got <- b.acquire(context.Background(), 6) }()
	select {
	case ok := <-got:
		t.Fatalf("12 of 10 bytes: acquire returned %v without waiting", ok)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(6)
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("acquire refused after the bytes were released")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("acquire still waiting after the bytes were released")
	}

	b.maxWait = 20 * time.Millisecond
	if b.acquire(context.Background(), 6) {
		t.Fatal("12 of 10 bytes with nothing released: acquired")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b.maxWait = time.Minute
	if b.acquire(ctx, 6) {
		t.Fatal("canceled context: acquired")
	}
	b.release(6)
	if !b.acquire(context.Background(), 10) {
		t.Fatal("10 of 10 bytes after every release: refused")
	}
}
