package meta

import (
	"testing"
	"time"
)

// TestRenewalAgeTakesTheLongerClock: a wall clock stepped back after a
// renewal (NTP, a VM restore) must not make the renewal look younger than
// the monotonic clock says, and a monotonic clock that stood still (host
// asleep) must not hide the time the wall clock saw pass. Either would
// keep an expired lease Valid.
func TestRenewalAgeTakesTheLongerClock(t *testing.T) {
	s := &Session{base: time.Now()}
	s.ttl.Store(5)
	s.setRenewed(time.Now().Add(-4500 * time.Millisecond)) // 90% of the TTL ago
	if s.Valid() {
		t.Fatal("a renewal 90% of the TTL old is Valid")
	}
	// The wall clock jumps back an hour: by it, the renewal lies in the future.
	s.renewedAt.Store(time.Now().Add(time.Hour).UnixNano())
	if age := s.renewalAge(); age < 4*time.Second {
		t.Fatalf("wall clock stepped back: age %v, want the monotonic ~4.5s", age)
	}
	if s.Valid() {
		t.Fatal("Valid after the wall clock stepped back")
	}
	// The monotonic clock stood still while the wall clock saw 10 s pass.
	s.setRenewed(time.Now())
	s.renewedAt.Store(time.Now().Add(-10 * time.Second).UnixNano())
	if age := s.renewalAge(); age < 10*time.Second {
		t.Fatalf("monotonic clock stood still: age %v, want the wall clock's 10s", age)
	}
	if s.Valid() {
		t.Fatal("Valid after 10 s the monotonic clock did not see")
	}
	s.setRenewed(time.Now())
	if !s.Valid() {
		t.Fatal("a fresh renewal is not Valid")
	}
}
