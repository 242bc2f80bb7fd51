package metatest

import (
	"net"
	"sync"
	"testing"
)

// Freezer is a TCP proxy that can stop forwarding in both directions
// without closing anything: the client's keep-alive requests and etcd's
// answers are held back, as when the network stalls or etcd stops
// answering, while etcd itself keeps the lease running down.
type Freezer struct {
	ln net.Listener
	mu sync.Mutex
	// What is held back: the client's requests, etcd's answers.
	requests, answers bool
	thaw              *sync.Cond
}

// NewFreezer proxies 127.0.0.1:<free port> to target until t ends; Addr
// is where to connect.
func NewFreezer(t testing.TB, target string) *Freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Freezer{ln: ln}
	f.thaw = sync.NewCond(&f.mu)
	t.Cleanup(func() { ln.Close(); f.Set(false) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go f.pipe(up, c, &f.requests)
			go f.pipe(c, up, &f.answers)
		}
	}()
	return f
}

// Addr is the proxy's listening address.
func (f *Freezer) Addr() string { return f.ln.Addr().String() }

// Set freezes (true) or thaws (false) every connection through the proxy.
func (f *Freezer) Set(frozen bool) { f.Hold(frozen, frozen) }

// Hold holds back the client's requests, etcd's answers, both or neither.
// Holding only the answers lets etcd renew a lease the client does not
// hear about; releasing them later delivers stale answers.
func (f *Freezer) Hold(requests, answers bool) {
	f.mu.Lock()
	f.requests, f.answers = requests, answers
	f.thaw.Broadcast()
	f.mu.Unlock()
}

// pipe copies src to dst while *held (guarded by mu) is false.
func (f *Freezer) pipe(dst, src net.Conn, held *bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		for *held {
			f.thaw.Wait()
		}
		f.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
