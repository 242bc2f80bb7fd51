// Command benchmatrix is `make bench`: it starts PicoMQ and its peers on
// loopback, runs a fixed short matrix in which every PicoMQ figure has a
// baseline or peer measured in the same run on the same disk, repeats it,
// and writes the report (results.json, table.md, SVG charts) with the
// spread over the runs. docs/benchmarks.md describes the rows.
//
//	go run ./e2e/benchmatrix -picomq bin/picomq -natsload X -nats-server Y [-klite Z] -out DIR [-runs 2] [-secs 3s] [-only http,ds]
//
// The NATS server and its load client come from the separate Go module
// under bench/ (make bench builds them); the Durable Streams reference
// server from the npm packages pinned in e2e/dsconformance; the optional
// Caddy Durable Streams peer from $PICOMQ_BENCH_CADDY (caddy.go).
package main

import (
	"bufio"
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
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

func main() {
	// The floors' child processes (floors.go) are this binary too.
	if isChild(os.Args[1:]) {
		os.Exit(childMain(os.Args[1:]))
	}
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchmatrix:", err)
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	picomq, natsload, natsServer string
	klite                        string // klite binary for the kafka group's side-by-side rows (klite.go)
	out, work, pkgDir            string
	runs                         int
	secs, warmup                 time.Duration
	only                         []string
	streams                      int           // streams created for the density rows
	createFor                    time.Duration // at most this long creating them
}

func (c *config) want(group string) bool {
	return len(c.only) == 0 || slices.Contains(c.only, group) ||
		(group == "kafka-klite" && slices.Contains(c.only, "kafka")) || // part of the kafka group, also runnable alone
		(group == "object-running" && slices.Contains(c.only, "object")) || // part of the object group, also runnable alone
		(group == "object-many" && slices.Contains(c.only, "object")) // part of the object group, also runnable alone
}

// groups are the parts of the matrix -only selects from.
var groups = []string{"wal", "http", "ds", "kafka", "kafka-klite", "kafka-txn", "consumers", "density", "object", "object-many", "object-running", "replicated"}

func run(args []string, stdout io.Writer) error {
	var c config
	var only string
	fs := flag.NewFlagSet("benchmatrix", flag.ContinueOnError)
	fs.StringVar(&c.picomq, "picomq", "bin/picomq", "picomq binary")
	fs.StringVar(&c.natsload, "natsload", "", "natsload binary (bench/natsload); empty skips the NATS peer")
	fs.StringVar(&c.natsServer, "nats-server", "", "nats-server binary (built from bench/go.mod)")
	fs.StringVar(&c.klite, "klite", "", "klite binary (built outside the repository, docs/benchmarks.md); empty: the Kafka vs klite rows are not measured")
	fs.StringVar(&c.out, "out", "bench-report", "report directory")
	fs.StringVar(&c.work, "work", "", "scratch directory for data (default: a temporary directory; keep it on the disk under test)")
	fs.StringVar(&c.pkgDir, "packages", "e2e/dsconformance", "dir with the pinned npm packages and reference-server.mjs")
	fs.IntVar(&c.runs, "runs", 2, "times the matrix is repeated")
	fs.DurationVar(&c.secs, "secs", 3*time.Second, "measured time per point")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load before each point")
	fs.IntVar(&c.streams, "streams", 100000, "streams created for the density rows (at most; creation stops after -create-for)")
	fs.DurationVar(&c.createFor, "create-for", 3*time.Minute, "at most this long creating the density rows' streams")
	fs.StringVar(&only, "only", "", "comma-separated groups to run: "+strings.Join(groups, ","))
	if err := fs.Parse(args); err != nil {
		return err
	}
	if only != "" {
		c.only = strings.Split(only, ",")
		for _, g := range c.only {
			if !slices.Contains(groups, g) {
				return fmt.Errorf("-only: unknown group %q", g)
			}
		}
	}
	if c.runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	if _, err := os.Stat(c.picomq); err != nil {
		return fmt.Errorf("picomq binary: %v (run make build)", err)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(c.work, "picomq-benchmatrix-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	c.work = work

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res := &benchreport.Results{Machine: machine(), Started: time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Runs: c.runs, Seconds: c.secs.Seconds()}
	m := &matrix{cfg: c, res: res}
	defer func() {
		if m.stopS3 != nil {
			m.stopS3()
		}
	}()
	start := time.Now()
	loads := sampleLoad(ctx, 10*time.Second)
	for r := 1; r <= c.runs; r++ {
		logf("run %d of %d", r, c.runs)
		if err := m.runOnce(ctx, r); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	res.Rows = m.rows
	res.LoadAverages = loads()
	res.MatrixSeconds = time.Since(start).Seconds()
	logf("matrix done in %s", time.Since(start).Round(time.Second))
	if err := res.Save(c.out); err != nil {
		return err
	}
	if err := res.Write(c.out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nPicoMQ next to its baselines and peers, same run, same disk (%s)\n%d runs, %s per point after %s warm-up; min–max over the runs\n\n",
		res.Machine, c.runs, c.secs, c.warmup)
	if n := len(res.LoadAverages); n > 0 {
		fmt.Fprintf(stdout, "load average during the matrix (%d samples): %.1f–%.1f; matrix time %s\n\n",
			n, slices.Min(res.LoadAverages), slices.Max(res.LoadAverages), time.Duration(res.MatrixSeconds*float64(time.Second)).Round(time.Second))
	}
	if err := res.Table(stdout); err != nil {
		return err
	}
	for _, f := range res.Failures {
		fmt.Fprintln(stdout, "not measured:", f)
	}
	fmt.Fprintf(stdout, "\nreport: %s/table.md (+ SVG charts)\n", c.out)
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s benchmatrix: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// machine describes where the run happened.
func machine() string {
	var u syscall.Utsname
	_ = syscall.Uname(&u)
	rel := func(a [65]int8) string {
		var b []byte
		for _, c := range a {
			if c == 0 {
				break
			}
			b = append(b, byte(c))
		}
		return string(b)
	}
	load := ""
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = ", load average " + strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return fmt.Sprintf("%d CPUs, %s %s, %s%s", runtime.NumCPU(), rel(u.Sysname), rel(u.Release), runtime.Version(), load)
}

// sampleLoad samples the 1-minute load average every interval until the
// returned function is called, which returns the samples.
func sampleLoad(ctx context.Context, every time.Duration) func() []float64 {
	var (
		mu      sync.Mutex
		samples []float64
	)
	sample := func() {
		b, err := os.ReadFile("/proc/loadavg")
		if err != nil {
			return
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			if v, err := strconv.ParseFloat(f[0], 64); err == nil {
				mu.Lock()
				samples = append(samples, v)
				mu.Unlock()
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			sample()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() []float64 {
		cancel()
		<-done
		sample()
		mu.Lock()
		defer mu.Unlock()
		return samples
	}
}

// matrix is the state of one matrix run.
type matrix struct {
	cfg  config
	res  *benchreport.Results
	rows []benchreport.Row
	// s3 is the MinIO of the object rows, started once (stopS3 stops it).
	s3     minio
	stopS3 func()
}

// row declares a table row (once, in the order of first use).
func (m *matrix) row(r benchreport.Row) string {
	if !slices.ContainsFunc(m.rows, func(x benchreport.Row) bool { return x.ID == r.ID }) {
		m.rows = append(m.rows, r)
	}
	return r.ID
}

// fail notes a measurement that could not be taken; the run goes on.
func (m *matrix) fail(what string, err error) {
	msg := fmt.Sprintf("%s: %v", what, err)
	logf("FAILED %s", msg)
	if !slices.Contains(m.res.Failures, msg) {
		m.res.Failures = append(m.res.Failures, msg)
	}
}

// runOnce runs every selected group once with fresh servers and data.
func (m *matrix) runOnce(ctx context.Context, run int) error {
	steps := []struct {
		group string
		fn    func(context.Context, int) error
	}{
		{"wal", m.walRows},
		{"http", m.httpRows},
		{"ds", m.dsRows},
		{"kafka", m.kafkaRows},
		{"kafka-klite", m.kliteRows},
		{"kafka-txn", m.kafkaTxnRows},
		{"consumers", m.consumerRows},
		{"density", m.densityRows},
		{"object", m.objectRows},
		{"object-many", m.manyReadersRows},
		{"object-running", m.coldRunningRows},
		{"replicated", m.replicatedRows},
	}
	for _, s := range steps {
		if !m.cfg.want(s.group) || ctx.Err() != nil {
			continue
		}
		if err := s.fn(ctx, run); err != nil {
			m.fail(s.group, err)
		}
	}
	return nil
}

// proc is a server process the matrix started.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testproc.SyncBuffer
	done chan struct{}
	pid  int
}

// start runs a server; lines of its stdout are also passed to onLine.
func start(name, bin string, args []string, dir string, onLine func(string)) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	return startCmd(name, cmd, onLine)
}

// startCmd is start for a command the caller prepared (its environment,
// say).
func startCmd(name string, cmd *exec.Cmd, onLine func(string)) (*proc, error) {
	p := &proc{name: name, cmd: cmd, out: &testproc.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.out
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.pid = p.cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(p.out, sc.Text())
			if onLine != nil {
				onLine(sc.Text())
			}
		}
	}()
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop sends SIGTERM and waits (SIGKILL after 20 s).
func (p *proc) stop() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) tail() string {
	s := p.out.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// node is a running picomq serve.
type node struct {
	*proc
	url, dataDir, kafkaAddr string
	args                    []string
}

// startNode starts picomq serve with a fresh data dir under the work dir
// (embedded etcd, local object store unless extra says otherwise) and
// waits until it is ready.
func (m *matrix) startNode(name string, extra ...string) (*node, error) {
	dir, err := os.MkdirTemp(m.cfg.work, name+"-")
	if err != nil {
		return nil, err
	}
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--data-dir", dir, "--http-addr", addr, "--node-id", "bench", "--log-level", "warn"}, extra...)
	if !slices.Contains(extra, "--kafka-addr") {
		args = append(args, "--kafka-addr", "off")
	}
	n := &node{url: "http://" + addr, dataDir: dir, args: args}
	if i := slices.Index(args, "--kafka-addr"); i >= 0 && args[i+1] != "off" {
		n.kafkaAddr = args[i+1]
	}
	return n, n.restart(name, m.cfg.picomq)
}

// restart starts the node's process (again) and waits until it is ready.
func (n *node) restart(name, bin string) error {
	p, err := start(name, bin, n.args, "", nil)
	if err != nil {
		return err
	}
	n.proc = p
	if err := testproc.WaitReady(n.url+"/readyz", p.done, 2*time.Minute); err != nil {
		p.stop()
		return fmt.Errorf("%s: %v\n%s", name, err, p.tail())
	}
	return nil
}

// startNATS starts nats-server with JetStream on a file store that
// fsyncs before every ack (sync_interval: always); without -natsload it
// starts nothing and returns a nil proc.
func (m *matrix) startNATS() (*proc, string, error) {
	if m.cfg.natsload == "" {
		return nil, "", nil
	}
	dir, err := os.MkdirTemp(m.cfg.work, "nats-")
	if err != nil {
		return nil, "", err
	}
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	host, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf("listen: \"%s:%s\"\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", host, port, filepath.Join(dir, "js"))
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	p, err := start("nats-server", m.cfg.natsServer, []string{"-c", cf}, "", nil)
	if err != nil {
		return nil, "", err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.out.String(), "Server is ready") {
		select {
		case <-p.done:
			return nil, "", fmt.Errorf("nats-server exited:\n%s", p.tail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, "", fmt.Errorf("nats-server not ready:\n%s", p.tail())
		}
	}
	return p, "nats://" + addr, nil
}

// startReference starts the Durable Streams Node reference server,
// file-backed, and returns its base URL.
func (m *matrix) startReference() (*proc, string, error) {
	pkgs, err := installPackages(m.cfg.pkgDir)
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(m.cfg.work, "dsref-")
	if err != nil {
		return nil, "", err
	}
	urls := make(chan string, 1)
	p, err := start("ds-reference", "node", []string{filepath.Join(pkgs, "reference-server.mjs"), "0", "--data-dir", dir}, pkgs,
		func(l string) {
			if u, ok := strings.CutPrefix(l, "listening "); ok {
				select {
				case urls <- strings.TrimSpace(u):
				default:
				}
			}
		})
	if err != nil {
		return nil, "", err
	}
	select {
	case u := <-urls:
		return p, strings.TrimSuffix(u, "/"), nil
	case <-p.done:
		return nil, "", fmt.Errorf("reference server exited:\n%s", p.tail())
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, "", fmt.Errorf("reference server did not start:\n%s", p.tail())
	}
}

// installPackages installs the pinned npm packages (e2e/dsconformance's
// lock) into the user cache dir shared with the conformance test, reusing
// an install of the same lock.
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

// httpGet is a GET that must answer 200; it returns the body.
func httpGet(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b, err
}
