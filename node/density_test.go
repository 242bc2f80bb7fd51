package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// restartStreams is the stream count of TestManyStreamsSurviveRestart:
// PICOMQ_RESTART_STREAMS, default 15,000 (what a loaded 2-core CI machine
// creates in well under a minute; BenchmarkStreamDensity runs 100,000).
func restartStreams() int {
	return testproc.EnvCount("PICOMQ_RESTART_STREAMS", 15_000)
}

// TestManyStreamsSurviveRestart creates many streams on one node (embedded
// etcd, 32 concurrent HTTP clients), restarts the node on the same data
// dir, and checks that every stream is listed afterwards and that a
// sample describes exactly as before.
func TestManyStreamsSurviveRestart(t *testing.T) {
	n := restartStreams()
	ctx := context.Background()
	dir := t.TempDir()
	start := func() (*Node, string) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		nd := startTestNode(t, sctx, dir, nil)
		return nd, "http://" + nd.Addr()
	}
	stop := func(nd *Node) {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := nd.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
	}

	nd, base := start()
	began := time.Now()
	if err := putStreams(base, n, 32); err != nil {
		stop(nd)
		t.Fatal(err)
	}
	t.Logf("%d streams created in %s", n, time.Since(began).Round(time.Millisecond))
	sample := []string{name(0), name(n / 2), name(n - 1)}
	before := make(map[string]string)
	for _, s := range sample {
		before[s] = describeStream(t, base, s)
	}
	stop(nd)

	began = time.Now()
	nd, base = start()
	defer stop(nd)
	t.Logf("restarted in %s", time.Since(began).Round(time.Millisecond))
	seen := listAll(t, base)
	if len(seen) != n {
		t.Fatalf("%d streams listed after the restart, want %d", len(seen), n)
	}
	for i := range n {
		if !seen[name(i)] {
			t.Fatalf("%s is missing after the restart", name(i))
		}
	}
	for _, s := range sample {
		if after := describeStream(t, base, s); after != before[s] {
			t.Errorf("%s describes as\n%s\nafter the restart, was\n%s", s, after, before[s])
		}
	}
}

func name(i int) string { return fmt.Sprintf("/many/s-%07d", i) }

// putStreams creates name(0..n-1) from c concurrent clients.
func putStreams(base string, n, c int) error {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: c}}
	defer client.CloseIdleConnections()
	return testproc.Parallel(n, c, func(i int) error {
		code, err := sendBytes(client, http.MethodPut, base+name(i), nil)
		if err != nil {
			return err
		}
		if code != http.StatusCreated {
			return fmt.Errorf("PUT %s: status %d", name(i), code)
		}
		return nil
	})
}

func describeStream(t *testing.T, base, s string) string {
	t.Helper()
	resp, err := http.Get(base + "/_streams" + s)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("describe %s: %d %s", s, resp.StatusCode, b)
	}
	return string(b)
}

// listAll pages through GET /_streams and returns the names listed.
func listAll(t *testing.T, base string) map[string]bool {
	t.Helper()
	seen := make(map[string]bool)
	cursor := ""
	for page := 0; ; page++ {
		u := base + "/_streams?limit=1000"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Streams []struct {
				Name string `json:"name"`
			} `json:"streams"`
			NextCursor string `json:"nextCursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("list page %d: status %d, %v", page, resp.StatusCode, err)
		}
		for _, s := range body.Streams {
			if seen[s.Name] {
				t.Fatalf("%s listed twice", s.Name)
			}
			seen[s.Name] = true
		}
		if body.NextCursor == "" {
			return seen
		}
		cursor = body.NextCursor
	}
}
