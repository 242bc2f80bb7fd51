package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dsConformanceDir holds the pinned npm packages of the official Durable
// Streams server conformance suite (package.json + package-lock.json) and
// the two small files that run it through vitest.
const dsConformanceDir = "dsconformance"

// dsConformanceMinTests is the number of non-optional tests in the pinned
// suite (@durable-streams/server-conformance-tests 0.3.6: 338 tests, 6 of
// them optional subscription tests). Fewer passing tests means the suite
// did not really run, which must fail as loudly as a failing test.
const dsConformanceMinTests = 332

// TestDurableStreamsConformance runs the official conformance suite against
// a real `picomq serve --protocol durable-streams` and fails unless every
// non-optional test passes. It needs Node.js and npm: without them it
// fails, it does not skip, so CI can never go green without running it.
// The npm install is cached in $XDG_CACHE_HOME (or ~/.cache)
// /picomq-ds-conformance and reused while the lock file is unchanged.
func TestDurableStreamsConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes about a minute; run without -short")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the Durable Streams conformance suite needs Node.js >= 20 and npm on PATH (%v)", tool, err)
		}
	}
	work := installConformanceSuite(t)

	n := startNode(t, t.TempDir(), "--protocol", "durable-streams", "--long-poll-timeout", "500ms")
	report := filepath.Join(t.TempDir(), "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(work, "node_modules", ".bin", "vitest"), "run",
		"--config", "./vitest.config.mjs", "--no-coverage",
		"--reporter=default", "--reporter=json", "--outputFile.json="+report)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "DS_CONFORMANCE_URL="+n.URL, "NO_COLOR=1", "FORCE_COLOR=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	runErr := cmd.Run()

	passed, failed, skipped, err := parseVitestReport(report)
	if err != nil {
		t.Fatalf("conformance suite produced no usable report (vitest: %v): %v\n%s", runErr, err, tail(out.String(), 4000))
	}
	t.Logf("ds-conformance: %d passed, %d failed, %d skipped (%s)", passed, len(failed), skipped, time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		t.Errorf("%d conformance tests failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	if passed < dsConformanceMinTests {
		t.Errorf("only %d conformance tests passed; the pinned suite has %d non-optional tests", passed, dsConformanceMinTests)
	}
	if runErr != nil && len(failed) == 0 {
		t.Errorf("vitest failed outside the tests: %v", runErr)
	}
	if t.Failed() {
		t.Logf("vitest output (tail):\n%s\n--- picomq log (tail):\n%s", tail(out.String(), 6000), tail(n.logs.String(), 4000))
	}
}

// installConformanceSuite installs the pinned suite (npmInstall).
func installConformanceSuite(t *testing.T) string {
	t.Helper()
	return npmInstall(t, dsConformanceDir, "picomq-ds-conformance",
		[]string{"package.json", "package-lock.json", "conformance.test.mjs", "vitest.config.mjs", "reference-server.mjs"},
		filepath.Join("node_modules", ".bin", "vitest"))
}

// npmInstall copies files of the pinned npm project in srcDir into the
// cache work dir $XDG_CACHE_HOME/<cacheName> (or ~/.cache/...) and runs
// npm install there unless an install of the very same package.json and
// lock file (with probe, a path that install creates, present) is
// already there. It returns the work dir.
func npmInstall(t *testing.T, srcDir, cacheName string, files []string, probe string) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatalf("no cache dir for the npm install: %v", err)
	}
	work := filepath.Join(cache, cacheName)
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(srcDir, f))
		if err != nil {
			t.Fatalf("pinned npm files: %v", err)
		}
		if err := os.WriteFile(filepath.Join(work, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if f == "package.json" || f == "package-lock.json" {
			sum.Write(b)
		}
	}
	want := hex.EncodeToString(sum.Sum(nil))
	stamp := filepath.Join(work, ".installed")
	if have, err := os.ReadFile(stamp); err == nil && string(have) == want {
		if _, err := os.Stat(filepath.Join(work, probe)); err == nil {
			return work
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// npm install (not npm ci): it honours the lock, and npm 11's ci
	// rejects the conformance lock over an optional Windows-only dependency.
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm install of the pinned packages in %s failed: %v\n%s", work, err, tail(string(out), 4000))
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	return work
}

// parseVitestReport reads vitest's JSON report: tests passed, the full
// names of failed ones, and how many were skipped. Skipped tests must all
// be the suite's optional subscription tests.
func parseVitestReport(path string) (passed int, failed []string, skipped int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, 0, err
	}
	var r struct {
		NumTotalTests int `json:"numTotalTests"`
		TestResults   []struct {
			Message          string `json:"message"`
			AssertionResults []struct {
				FullName        string   `json:"fullName"`
				Status          string   `json:"status"`
				AncestorTitles  []string `json:"ancestorTitles"`
				FailureMessages []string `json:"failureMessages"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, nil, 0, fmt.Errorf("report %s: %v", path, err)
	}
	if r.NumTotalTests == 0 {
		return 0, nil, 0, fmt.Errorf("report %s lists no tests", path)
	}
	for _, f := range r.TestResults {
		if f.Message != "" {
			failed = append(failed, "test file: "+f.Message)
		}
		for _, a := range f.AssertionResults {
			switch a.Status {
			case "passed":
				passed++
			case "skipped", "pending", "todo":
				if len(a.AncestorTitles) > 0 && a.AncestorTitles[0] == "Reserved subscription APIs" {
					skipped++
					continue
				}
				failed = append(failed, a.FullName+" (skipped, but it is not optional)")
			default:
				msg := ""
				if len(a.FailureMessages) > 0 {
					msg = ": " + strings.SplitN(a.FailureMessages[0], "\n", 2)[0]
				}
				failed = append(failed, a.FullName+msg)
			}
		}
	}
	return passed, failed, skipped, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
