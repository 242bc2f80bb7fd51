package h1

import (
	"net"
	"testing"
	"time"
)

// probePair is a loopback connection's two ends: the client's, with its
// probe, and the server's.
func probePair(t testing.TB) (client net.Conn, server net.Conn, p *probe) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	p = newProbe(client)
	if p == nil {
		t.Fatal("no probe for a TCP connection")
	}
	return client, server, p
}

// awaitDead waits, boundedly, for the probe to see what the server did
// (loopback delivers it at once on a quiet machine, not necessarily on a
// loaded one).
func awaitDead(t *testing.T, p *probe, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for p.alive() {
		if time.Now().After(deadline) {
			t.Fatalf("connection still alive 30 s after %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestProbe(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		_, _, p := probePair(t)
		for range 3 {
			if !p.alive() {
				t.Fatal("an idle open connection is not alive")
			}
		}
	})
	t.Run("unasked data", func(t *testing.T) {
		c, s, p := probePair(t)
		if _, err := s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		awaitDead(t, p, "the server wrote unasked")
		// The peek left the bytes in place.
		b := make([]byte, 8)
		if n, err := c.Read(b); err != nil || string(b[:n]) != "HTTP/1.1" {
			t.Fatalf("read %q, %v after the probe", b[:n], err)
		}
	})
	t.Run("closed by the server", func(t *testing.T) {
		_, s, p := probePair(t)
		s.Close()
		awaitDead(t, p, "the server closed it")
	})
	t.Run("closed here", func(t *testing.T) {
		c, _, p := probePair(t)
		c.Close()
		if p.alive() {
			t.Fatal("a closed connection is alive")
		}
	})
}

// TestProbeAllocs: the check before every reused request allocates
// nothing (2 through RawConn.Read and syscall.Recvfrom, and one more for
// SyscallConn, which is now once per connection).
func TestProbeAllocs(t *testing.T) {
	_, _, p := probePair(t)
	if n := testing.AllocsPerRun(100, func() {
		if !p.alive() {
			t.Fatal("not alive")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per check, want 0", n)
	}
}

func BenchmarkAlive(b *testing.B) {
	_, _, p := probePair(b)
	b.ReportAllocs()
	for b.Loop() {
		if !p.alive() {
			b.Fatal("not alive")
		}
	}
}
