package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// profileDirEnv names a directory: when set, the cold-read row profiles
// the node (through --pprof-addr) and this process (the Go client) over
// the read, into node-<row>.pprof and client-<row>.pprof there, so the
// time of a cold read can be attributed (docs/benchmarks.md).
const profileDirEnv = "PICOMQ_BENCH_PROFILE_DIR"

// pprofArgs returns the serve flags that expose the node's profiles when
// profiling is asked for, and the address they use.
func pprofArgs() ([]string, string) {
	if os.Getenv(profileDirEnv) == "" {
		return nil, ""
	}
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, ""
	}
	return []string{"--pprof-addr", addr}, addr
}

// profileRead starts CPU profiles of the node at pprofAddr and of this
// process for the row named row; stop ends both and writes them. Without
// profiling asked for (or without an address) it does nothing.
func profileRead(row, pprofAddr string) (stop func()) {
	dir := os.Getenv(profileDirEnv)
	if dir == "" || pprofAddr == "" {
		return func() {}
	}
	_ = os.MkdirAll(dir, 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// The node's CPU profile and execution trace (where a read waits) run
	// for a fixed time; the read is shorter, and an idle node adds little.
	for _, p := range []struct{ path, file string }{
		{"profile?seconds=4", "node-" + row + ".pprof"},
		{"trace?seconds=3", "node-" + row + ".trace"},
	} {
		wg.Go(func() {
			url := fmt.Sprintf("http://%s/debug/pprof/%s", pprofAddr, p.path)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				logf("  profile %s: node: %v", row, err)
				return
			}
			defer resp.Body.Close()
			f, err := os.Create(filepath.Join(dir, p.file))
			if err != nil {
				return
			}
			defer f.Close()
			_, _ = io.Copy(f, resp.Body)
		})
	}
	nodeDone := make(chan struct{})
	go func() { wg.Wait(); close(nodeDone) }()
	time.Sleep(100 * time.Millisecond) // let the node's profile start first
	cf, err := os.Create(filepath.Join(dir, "client-"+row+".pprof"))
	if err == nil && pprof.StartCPUProfile(cf) != nil {
		cf.Close()
		cf = nil
	}
	tf, err := os.Create(filepath.Join(dir, "client-"+row+".trace"))
	if err == nil && trace.Start(tf) != nil {
		tf.Close()
		tf = nil
	}
	return func() {
		if cf != nil {
			pprof.StopCPUProfile()
			cf.Close()
		}
		if tf != nil {
			trace.Stop()
			tf.Close()
		}
		select {
		case <-nodeDone:
		case <-time.After(10 * time.Second):
			cancel()
		}
	}
}
