package netx

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestTemporary(t *testing.T) {
	wrap := func(e error) error {
		return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", e)}
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wrap(syscall.EMFILE), true},
		{wrap(syscall.ENFILE), true},
		{fmt.Errorf("kafka: %w", wrap(syscall.ECONNABORTED)), true},
		{net.ErrClosed, false},
		{wrap(syscall.EINVAL), false},
		{errors.New("other"), false},
	} {
		if got := Temporary(c.err); got != c.want {
			t.Errorf("Temporary(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	var b Backoff
	if b.Failing() {
		t.Fatal("failing before any error")
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("step %d: %s, want %s", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if b.Failing() || b.Next() != 5*time.Millisecond {
		t.Fatal("reset did not start over")
	}
}
