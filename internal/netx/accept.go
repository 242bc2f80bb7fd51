// Package netx holds what the node's accept loops (api/h1lane, kafka) share:
// which Accept errors pass, and how long to wait before trying again.
package netx

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// Temporary reports whether an Accept error is one the listener survives:
// the process or the system is out of file descriptors or buffers
// (EMFILE, ENFILE, ENOBUFS, ENOMEM), or a connection went away before it
// was accepted. net/http's own Serve retries the same kind (its
// Temporary()); a loop that returned instead would stop serving for good
// at the first fd exhaustion.
func Temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range [...]syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EAGAIN, syscall.EINTR, syscall.EPROTO, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Backoff is an accept loop's wait after temporary errors: 5 ms,
// doubling up to 1 s (net/http's figures), back to none after a success.
type Backoff struct{ d time.Duration }

// Next returns how long to wait before the next Accept.
func (b *Backoff) Next() time.Duration {
	b.d = min(max(2*b.d, 5*time.Millisecond), time.Second)
	return b.d
}

// Failing reports whether the last Accept failed.
func (b *Backoff) Failing() bool { return b.d > 0 }

// Reset is called after a successful Accept.
func (b *Backoff) Reset() { b.d = 0 }
