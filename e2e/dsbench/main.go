// Command dsbench measures Durable Streams append throughput of PicoMQ side
// by side with the protocol's Node reference server
// (@durable-streams/server, file-backed) in the same run, on the same
// machine, with the same client: 100-byte JSON appends, one POST per
// append, from 1 and from 32 concurrent writers. Both servers fdatasync
// before they acknowledge (PicoMQ's WAL group commit; the reference's
// coalesced fdatasync), so the numbers compare durable appends.
//
// Usage (make bench-ds does this):
//
//	go run ./e2e/dsbench -picomq bin/picomq [-duration 10s] [-writers 1,32] [-size 100]
//
// The reference server comes from the pinned npm packages in
// e2e/dsconformance, installed into the user cache dir like the
// conformance test does.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dsbench:", err)
		os.Exit(1)
	}
}

type result struct {
	server   string
	writers  int
	appends  int64
	errors   int64
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r result) rate() float64 { return float64(r.appends) / r.elapsed.Seconds() }

func run() error {
	picomq := flag.String("picomq", "bin/picomq", "picomq binary")
	pkgDir := flag.String("packages", "e2e/dsconformance", "dir with the pinned package.json/package-lock.json and reference-server.mjs")
	duration := flag.Duration("duration", 10*time.Second, "measured time per case")
	warmup := flag.Duration("warmup", 2*time.Second, "unmeasured time before each case")
	writersFlag := flag.String("writers", "1,32", "comma-separated concurrent writer counts")
	size := flag.Int("size", 100, "bytes per JSON append body")
	flag.Parse()

	var writers []int
	for _, s := range strings.Split(*writersFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-writers %q", *writersFlag)
		}
		writers = append(writers, n)
	}
	if *size < 16 {
		return errors.New("-size must be at least 16")
	}
	if _, err := os.Stat(*picomq); err != nil {
		return fmt.Errorf("picomq binary: %v (run make build)", err)
	}
	work, err := installPackages(*pkgDir)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "dsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	pAddr, err := freeAddr()
	if err != nil {
		return err
	}
	pico, err := startProcess(*picomq, []string{"serve", "--protocol", "durable-streams", "--data-dir", filepath.Join(tmp, "picomq"),
		"--http-addr", pAddr, "--kafka-addr", "off", "--node-id", "bench", "--log-level", "warn"}, "", nil)
	if err != nil {
		return err
	}
	defer pico.stop()
	if err := waitReady("http://" + pAddr + "/readyz"); err != nil {
		return fmt.Errorf("picomq: %v\n%s", err, pico.out.String())
	}

	rAddr, err := freeAddr()
	if err != nil {
		return err
	}
	_, rPort, _ := net.SplitHostPort(rAddr)
	ready := make(chan struct{})
	ref, err := startProcess("node", []string{filepath.Join(work, "reference-server.mjs"), rPort, "--data-dir", filepath.Join(tmp, "reference")}, work, ready)
	if err != nil {
		return err
	}
	defer ref.stop()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("reference server did not start\n%s", ref.out.String())
	}

	servers := []struct{ name, base string }{
		{"picomq", "http://" + pAddr},
		{"reference", "http://" + rAddr},
	}
	fmt.Printf("dsbench: %d-byte JSON appends, %s per case after %s warm-up, %d CPUs\n",
		*size, *duration, *warmup, runtime.NumCPU())
	var results []result
	for _, w := range writers {
		for _, s := range servers {
			r, err := bench(s.name, s.base, w, *size, *warmup, *duration)
			if err != nil {
				return fmt.Errorf("%s with %d writers: %v", s.name, w, err)
			}
			fmt.Printf("  %-9s %2d writers: %9.0f appends/s  p50 %7s  p99 %7s  (%d appends, %d errors)\n",
				r.server, r.writers, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.appends, r.errors)
			results = append(results, r)
		}
	}
	fmt.Println()
	fmt.Println("| writers | picomq appends/s | reference appends/s | ratio |")
	fmt.Println("|---:|---:|---:|---:|")
	for _, w := range writers {
		var p, ref result
		for _, r := range results {
			if r.writers == w && r.server == "picomq" {
				p = r
			} else if r.writers == w {
				ref = r
			}
		}
		fmt.Printf("| %d | %.0f | %.0f | %.1f× |\n", w, p.rate(), ref.rate(), p.rate()/ref.rate())
	}
	return nil
}

// bench creates a fresh JSON stream and appends to it from writers
// goroutines: warm-up first, then the measured window.
func bench(server, base string, writers, size int, warmup, duration time.Duration) (result, error) {
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute,
	}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("%s/v1/stream/dsbench-%d-%d", base, writers, time.Now().UnixNano())
	req, _ := http.NewRequest("PUT", url, nil)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return result{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return result{}, fmt.Errorf("create: status %d", resp.StatusCode)
	}

	var measuring atomic.Bool
	var appends, fails atomic.Int64
	stop := make(chan struct{})
	lat := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i := range writers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			body := make([]byte, 0, size)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				body = jsonBody(body[:0], i, n, size)
				start := time.Now()
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 204 {
						err = fmt.Errorf("append: status %d", resp.StatusCode)
					}
				}
				d := time.Since(start)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				appends.Add(1)
				lat[i] = append(lat[i], d)
			}
		}(i)
	}
	time.Sleep(warmup)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(duration)
	measuring.Store(false)
	elapsed := time.Since(t0)
	close(stop)
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok && appends.Load() == 0 {
		return result{}, e
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := result{server: server, writers: writers, appends: appends.Load(), errors: fails.Load(), elapsed: elapsed}
	if len(all) > 0 {
		r.p50 = all[len(all)/2]
		r.p99 = all[len(all)*99/100]
	}
	return r, nil
}

// jsonBody writes a JSON object of exactly size bytes that differs per
// writer and append: {"w":1,"n":2,"p":"xxx…"}.
func jsonBody(dst []byte, w, n, size int) []byte {
	dst = fmt.Appendf(dst, `{"w":%d,"n":%d,"p":"`, w, n)
	for len(dst) < size-2 {
		dst = append(dst, 'x')
	}
	return append(dst, `"}`...)
}

type process struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

type syncBuffer = testproc.SyncBuffer

// startProcess runs a server. If ready is non-nil it is closed when the
// process prints a line starting with "listening".
func startProcess(bin string, args []string, dir string, ready chan struct{}) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stderr = p.out
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %v", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.out, line)
			if ready != nil && strings.HasPrefix(line, "listening") {
				close(ready)
				ready = nil
			}
		}
	}()
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

var freeAddr = testproc.FreeAddr

func waitReady(url string) error { return testproc.WaitReady(url, nil, 60*time.Second) }

// installPackages installs the pinned npm packages into the user cache dir
// (shared with the conformance test), reusing an install of the same lock.
func installPackages(src string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	work := filepath.Join(cache, "picomq-ds-conformance")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	sum := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json", "conformance.test.mjs", "vitest.config.mjs", "reference-server.mjs"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("pinned packages: %v", err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			return "", err
		}
		if f == "package.json" || f == "package-lock.json" {
			sum.Write(b)
		}
	}
	want := hex.EncodeToString(sum.Sum(nil))
	stamp := filepath.Join(work, ".installed")
	if have, err := os.ReadFile(stamp); err == nil && string(have) == want {
		if _, err := os.Stat(filepath.Join(work, "node_modules", "@durable-streams", "server")); err == nil {
			return work, nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund")
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install in %s: %v\n%s", work, err, out)
	}
	return work, os.WriteFile(stamp, []byte(want), 0o644)
}
