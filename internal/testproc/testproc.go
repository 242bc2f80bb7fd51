// Package testproc holds what every black-box test harness of this module
// needs to run real processes (picomq, MinIO, etcd, the reference server)
// on loopback: a build of the binary, a free port, a started process with
// its log buffer (Proc), a readiness wait, and a one-member etcd (Etcd).
// It imports only the standard library and is a Go module of its own, so
// any package's tests may use it — the Go client's included, which is a
// module apart from the server's and must not require it.
package testproc

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Picomq is the import path of the picomq binary.
const Picomq = "github.com/PicoMQ/picomq/cmd/picomq"

// Build runs `go build -o out pkg`, its output on stderr; tags are build
// tags (tests build deliberately broken variants this way).
func Build(out, pkg string, tags ...string) error {
	out, err := filepath.Abs(out) // the build may run in another directory
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if strings.HasPrefix(pkg, serverModule+"/") {
		// The caller may be another module's test (the Go client's), in
		// which the server's packages do not resolve: build in the server
		// module's directory.
		root, err := serverRoot()
		if err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
		cmd.Dir = root
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// serverModule is the module path of the PicoMQ server.
const serverModule = "github.com/PicoMQ/picomq"

// serverRoot returns the directory of the server module's go.mod: the
// working directory (a test's package directory) or the nearest parent
// whose go.mod declares serverModule.
func serverRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.TrimSpace(line) == "module "+serverModule {
					return dir, nil
				}
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no parent directory holds the go.mod of %s", serverModule)
		}
		dir = parent
	}
}

// PicomqBinary returns $PICOMQ_TEST_BIN (a prebuilt picomq), or else
// builds Picomq into dir/picomq.
func PicomqBinary(dir string) (string, error) {
	if bin := os.Getenv("PICOMQ_TEST_BIN"); bin != "" {
		return bin, nil
	}
	bin := filepath.Join(dir, "picomq")
	return bin, Build(bin, Picomq)
}

// FreeAddr returns a loopback address that was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitReady polls url until it answers 200, the process exits (exited is
// closed; nil means never), or within has passed.
func WaitReady(url string, exited <-chan struct{}, within time.Duration) error {
	return WaitReadyWith(nil, url, exited, within)
}

// WaitReadyWith is WaitReady through client c (nil: a plain one with a 2s
// timeout); an https url needs a client that trusts the server's
// certificate.
func WaitReadyWith(c *http.Client, url string, exited <-chan struct{}, within time.Duration) error {
	if c == nil {
		c = &http.Client{Timeout: 2 * time.Second}
	}
	err := WaitFor(func() error {
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}, exited, within)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}

// SyncBuffer is a bytes.Buffer a child process writes to while the test
// reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CPUSeconds is the user+system CPU time of a process, from /proc.
func CPUSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// RSSBytes is a process's resident set size, from /proc.
func RSSBytes(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			kb, _ := strconv.ParseFloat(f[0], 64)
			return kb * 1024
		}
	}
	return 0
}

// EnvCount is the positive whole number in the environment variable name,
// or def when it is unset or not one: how tests and benchmarks take their
// size knobs (PICOMQ_DENSITY_STREAMS and the like).
func EnvCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchDir is where a benchmark puts its files: a new directory named
// prefix* under $PICOMQ_BENCH_DIR when that is set (to measure a
// particular disk), else a temporary directory. Benchmarks compared with
// each other (the WAL and its fdatasync baseline, a protocol and the WAL
// alone) must use the same disk for the comparison to mean anything.
func BenchDir(b testing.TB, prefix string) string {
	base := os.Getenv("PICOMQ_BENCH_DIR")
	if base == "" {
		return b.TempDir()
	}
	dir, err := os.MkdirTemp(base, prefix)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
