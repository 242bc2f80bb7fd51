//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"net"
	"syscall"
)

// probe checks whether an idle connection is still usable: the server has
// neither closed it (a peek reads EOF or fails) nor sent anything unasked
// (a peek reads data). The socket is non-blocking, so the peek returns
// EAGAIN at once when there is nothing to read, which is the healthy case.
// net/http learns the same from the read it keeps pending on every idle
// connection; this costs one system call per reuse instead of a goroutine
// per connection. (Linux has a cheaper one: alive_linux.go.)
type probe struct {
	rc syscall.RawConn
}

// newProbe returns nc's probe, or nil when nc is not a socket it can peek
// at (a test's pipe), which alive then trusts.
func newProbe(nc net.Conn) *probe {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return &probe{rc: rc}
}

// alive reports whether the connection may carry a request.
func (p *probe) alive() bool {
	if p == nil {
		return true
	}
	healthy := false
	var b [1]byte
	err := p.rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		healthy = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait for readiness
	})
	return err == nil && healthy
}
