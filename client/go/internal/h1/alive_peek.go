//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package h1

import (
	"net"
	"syscall"
)

// alive reports whether an idle connection is still usable: the server
// has neither closed it (a peek reads EOF or fails) nor sent anything
// unasked (a peek reads data). The socket is non-blocking, so the peek
// returns EAGAIN at once when there is nothing to read, which is the
// healthy case. net/http learns the same from the read it keeps pending
// on every idle connection; this costs one system call per reuse instead
// of a goroutine per connection.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true // not a socket we can peek at (a test's pipe): trust it
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	healthy := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		healthy = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait for readiness
	})
	return err == nil && healthy
}
