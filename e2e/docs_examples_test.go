package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDocsExamples runs every shell example of README.md and docs/*.md
// against a real node, in the order the document shows them, so the docs
// cannot drift from the code. For each document:
//
//   - the commands are the lines of fenced code blocks that start with
//     `curl`, `picomq` (client commands, `encode`, `token`) or `printf … |`,
//     continuation lines (`\`) joined; other lines (output, comments) are
//     not run;
//   - a fresh node serves them, started as `make run` does, with the flags of
//     the block's own `picomq serve …` line if it has one (the Durable
//     Streams tour), plus a short --long-poll-timeout and --sse-timeout so
//     live reads end by themselves; 127.0.0.1:4437 and localhost:4437 are
//     rewritten to the node's address and PICOMQ_SERVER names it;
//   - commands run in one temporary directory per document (files such as
//     batch.bin carry from one command to the next) under bash -o pipefail;
//     every one must exit 0, and curl runs with --fail-with-body (a
//     .curlrc), so an HTTP status of 400 or more fails the example;
//   - a trailing comment that starts with `[` or `{` is the output the
//     document promises: stdout must equal it;
//   - `picomq tail -f` runs until it is stopped (3 s), which is its success;
//   - a curl example that sends a body must set its Content-Type.
//
// A block that cannot run on one plain node (a cluster, kcat, a synopsis)
// is preceded by the line `<!-- docs-test: skip: <reason> -->`; the test
// logs every skipped block with its reason.
func TestDocsExamples(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	home := t.TempDir() // curl reads $HOME/.curlrc
	if err := os.WriteFile(filepath.Join(home, ".curlrc"), []byte("fail-with-body\nmax-time = 20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, f := range files {
		doc, err := parseDocExamples(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range doc.skipped {
			t.Logf("%s: skipped block at line %d: %s", f, s.line, s.reason)
		}
		if len(doc.cmds) == 0 {
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			ran += len(doc.cmds)
			runDocExamples(t, doc, home)
		})
	}
	if ran < 40 {
		t.Fatalf("ran %d doc examples; the extraction found too few (the docs hold more)", ran)
	}
	t.Logf("ran %d doc examples", ran)
}

type docCmd struct {
	line   int    // line in the document
	text   string // the command, continuation lines joined
	output string // expected stdout, "" = not shown
}

type docSkip struct {
	line   int
	reason string
}

type docExamples struct {
	file    string
	serve   []string // flags of the document's picomq serve line
	cmds    []docCmd
	skipped []docSkip
}

var (
	docSkipRe   = regexp.MustCompile(`^<!-- docs-test: skip: (.+) -->$`)
	docCmdRe    = regexp.MustCompile(`^(curl |picomq |printf )`)
	docOutputRe = regexp.MustCompile(`\s+# ([\[{].*)$`)
)

func parseDocExamples(path string) (docExamples, error) {
	d := docExamples{file: path}
	b, err := os.ReadFile(path)
	if err != nil {
		return d, err
	}
	lines := strings.Split(string(b), "\n")
	inBlock, skip := false, ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := docSkipRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil && !inBlock {
			skip = m[1]
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), "```") { // fences may be indented (lists)
			if !inBlock && skip != "" {
				d.skipped = append(d.skipped, docSkip{i + 1, skip})
			}
			inBlock = !inBlock
			if !inBlock {
				skip = ""
			}
			continue
		}
		if !inBlock || skip != "" {
			continue
		}
		start := i
		text := strings.TrimSpace(l)
		for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(text, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if !docCmdRe.MatchString(text) {
			continue
		}
		if strings.HasPrefix(text, "picomq serve") {
			flags := strings.Fields(strings.SplitN(text, "#", 2)[0])[2:]
			d.serve = append(d.serve, flags...)
			continue
		}
		c := docCmd{line: start + 1, text: text}
		if strings.HasPrefix(text, "curl ") && regexp.MustCompile(`\s(-d|--data[a-z-]*)\s`).MatchString(text) && !strings.Contains(text, "Content-Type") {
			// curl -d alone sends application/x-www-form-urlencoded: a 409
			// on every stream that is not form data (docs/api.md#headers).
			return d, fmt.Errorf("%s:%d: a curl example with a body but no -H 'Content-Type: …': %s", path, start+1, text)
		}
		if m := docOutputRe.FindStringSubmatch(text); m != nil {
			c.output = m[1]
		}
		d.cmds = append(d.cmds, c)
	}
	if inBlock {
		return d, fmt.Errorf("%s: unterminated code block", path)
	}
	return d, nil
}

func runDocExamples(t *testing.T, doc docExamples, home string) {
	args := append([]string{"--long-poll-timeout", "1s", "--sse-timeout", "2s"}, doc.serve...)
	n := startNode(t, t.TempDir(), args...)
	addr := strings.TrimPrefix(n.URL, "http://")
	dir := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "PICOMQ_SERVER="+n.URL, "PICOMQ_PROTOCOL=", "PICOMQ_TOKEN=",
		"PATH="+filepath.Dir(picomqBin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if slicesContains(doc.serve, "durable-streams") {
		env = append(env, "PICOMQ_PROTOCOL=durable-streams")
	}
	for _, c := range doc.cmds {
		cmdText := strings.NewReplacer("http://127.0.0.1:4437", n.URL, "localhost:4437", addr, "127.0.0.1:4437", addr).Replace(c.text)
		follow := regexp.MustCompile(`\bpicomq tail\b.*(\s-f\b|--follow)`).MatchString(cmdText)
		limit := 30 * time.Second
		if follow {
			limit = 3 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmdText)
		cmd.Dir, cmd.Env = dir, env
		// Stopping a command stops its whole pipeline, not just bash.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		where := fmt.Sprintf("%s:%d: %s", filepath.Base(doc.file), c.line, c.text)
		switch {
		case follow && timedOut:
			// Following ends only when stopped.
		case timedOut:
			t.Errorf("%s\n  did not finish within %s", where, limit)
			continue
		case err != nil:
			var ee *exec.ExitError
			code := -1
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			t.Errorf("%s\n  exit %d\n  stdout: %s\n  stderr: %s", where, code, firstLines(stdout.String(), 12), firstLines(stderr.String(), 6))
			continue
		}
		if c.output != "" && strings.TrimSpace(stdout.String()) != c.output {
			t.Errorf("%s\n  printed %q\n  the doc says %q", where, strings.TrimSpace(stdout.String()), c.output)
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func firstLines(s string, n int) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() && len(out) < n {
		out = append(out, sc.Text())
	}
	return strings.Join(out, "\n          ")
}
