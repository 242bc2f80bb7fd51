package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// pprofServer is the --pprof-addr debug listener: Go's runtime profiles
// (CPU, heap, allocs, goroutines, mutex, block, trace) under /debug/pprof/.
// It has no authentication, so it only ever binds loopback (Validate
// refuses anything else) and is off unless asked for.
type pprofServer struct {
	ln  net.Listener
	srv *http.Server
}

// validatePprofAddr accepts "" (off) or a loopback host:port.
func validatePprofAddr(addr string) error {
	if addr == "" || isLoopbackAddr(addr) {
		return nil
	}
	return fmt.Errorf("--pprof-addr %s: the profiling listener has no authentication and binds loopback only (127.0.0.1:PORT, [::1]:PORT or localhost:PORT)", addr)
}

// listenPprof binds the debug listener; nil when --pprof-addr is empty.
func listenPprof(addr string) (*pprofServer, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // named profiles: heap, allocs, goroutine, block, mutex …
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	p := &pprofServer{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is the bound address ("" when off).
func (p *pprofServer) Addr() string {
	if p == nil {
		return ""
	}
	return p.ln.Addr().String()
}

// close stops the listener; a profile being taken is cut short.
func (p *pprofServer) close(ctx context.Context) {
	if p == nil {
		return
	}
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = p.srv.Close()
	}
}
