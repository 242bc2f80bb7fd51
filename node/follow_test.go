package node

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/kafka"
	"github.com/PicoMQ/picomq/meta/metatest"
)

// TestFollowServesLocalReads: /_sys/follow/{stream} on the node serving the
// stream answers exactly what the stream's own URL answers (status, body,
// offsets), a live tail through it gets each event as it happens (the
// wrapper passes flushes on), and it is checked as a read of that stream.
func TestFollowServesLocalReads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const admin, reader, other = "pmq_follow_admin", "pmq_follow_reader", "pmq_follow_other"
	n := startTestNode(t, ctx, t.TempDir(), nil, "--auth-tokens",
		writeTokenFile(t, admin, reader, "read:/follow/", other, "read:/elsewhere/"))
	shutdownAtEnd(t, n)
	base := "http://" + n.Addr()
	client := &http.Client{Timeout: 30 * time.Second}
	send := func(method, path, token, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" || method == http.MethodPut {
			req.Header.Set("Content-Type", "text/plain")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if r, b := send("PUT", "/follow/s", admin, ""); r.StatusCode != 201 {
		t.Fatalf("create: %d %s", r.StatusCode, b)
	}
	for _, v := range []string{"one", "two"} {
		if r, b := send("POST", "/follow/s", admin, v); r.StatusCode != 200 {
			t.Fatalf("append: %d %s", r.StatusCode, b)
		}
	}

	direct, dbody := send("GET", "/follow/s?offset=0&limit=10", reader, "")
	via, vbody := send("GET", "/_sys/follow/follow/s?offset=0&limit=10", reader, "")
	if via.StatusCode != 200 || via.StatusCode != direct.StatusCode || vbody != dbody ||
		via.Header.Get("Pico-Next-Offset") != direct.Header.Get("Pico-Next-Offset") || via.Header.Get("Content-Type") != direct.Header.Get("Content-Type") {
		t.Fatalf("follow answered %d %q (next %q), the stream's URL %d %q (next %q)", via.StatusCode, vbody, via.Header.Get("Pico-Next-Offset"),
			direct.StatusCode, dbody, direct.Header.Get("Pico-Next-Offset"))
	}
	if h, _ := send("HEAD", "/_sys/follow/follow/s", reader, ""); h.StatusCode != 200 || h.Header.Get("Pico-Next-Offset") != "2" {
		t.Errorf("HEAD through follow: %d, next %q", h.StatusCode, h.Header.Get("Pico-Next-Offset"))
	}
	for _, c := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/_sys/follow/follow/s", other, http.StatusForbidden}, // a read of /follow/s
		{"GET", "/_sys/follow/follow/missing", reader, http.StatusNotFound},
		{"POST", "/_sys/follow/follow/s", admin, http.StatusMethodNotAllowed}, // reads only
		{"GET", "/_sys/follow/", admin, http.StatusBadRequest},
		{"GET", "/_sys/follow/_streams", admin, http.StatusBadRequest}, // a listing is not a stream
		{"GET", "/_sys/follow/_sys/cluster", admin, http.StatusBadRequest},
	} {
		if r, b := send(c.method, c.path, c.token, ""); r.StatusCode != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.StatusCode, b, c.want)
		}
	}

	// A live tail through follow sees a record appended after it started.
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/_sys/follow/follow/s?offset=2&live=sse", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("live tail through follow: %d %s", resp.StatusCode, ct)
	}
	events := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				events <- d
			}
		}
		close(events)
	}()
	if r, b := send("POST", "/follow/s", admin, "three"); r.StatusCode != 200 {
		t.Fatalf("append: %d %s", r.StatusCode, b)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d, ok := <-events:
			if !ok {
				t.Fatal("the live tail ended before the new record")
			}
			if strings.Contains(d, "three") {
				return
			}
		case <-deadline:
			t.Fatal("the record appended after the tail started did not arrive through follow within 10 s")
		}
	}
}

// TestNodeFiguresMatchMetrics: GET /_sys/node reports the numbers the
// node's /metrics gives, and /_sys/cluster?figures=true carries them.
func TestNodeFiguresMatchMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(t, ctx, t.TempDir(), nil, "--seal-max-age", "1h")
	shutdownAtEnd(t, n)
	base := "http://" + n.Addr()
	for _, p := range []string{"/figures/a", "/figures/b"} {
		for _, m := range []string{"PUT", "POST"} {
			req, _ := http.NewRequestWithContext(ctx, m, base+p, strings.NewReader("x"))
			req.Header.Set("Content-Type", "text/plain")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	getJSON := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var f nodeFigures
	getJSON("/_sys/node", &f)
	m := scrapeMetrics(t, base)
	if f.NodeID == "" || f.StreamsOwned != 2 || float64(f.StreamsOwned) != m["picomq_streams"] ||
		f.UnflushedBytes <= 0 || float64(f.UnflushedBytes) != m["picomq_unflushed_bytes"] ||
		float64(f.WALDiskBytes) != m["picomq_wal_disk_bytes"] || float64(f.ObjectBytes) != m["picomq_object_bytes"] ||
		f.FlushLagMs <= 0 || m["picomq_flush_lag_seconds"]*1000 < float64(f.FlushLagMs) {
		t.Fatalf("figures %+v, /metrics %v", f, m)
	}
	var c struct {
		Nodes []clusterNode `json:"nodes"`
	}
	getJSON("/_sys/cluster?figures=true", &c)
	if len(c.Nodes) != 1 || c.Nodes[0].Figures == nil || c.Nodes[0].Figures.StreamsOwned != 2 || c.Nodes[0].FiguresError != "" {
		t.Fatalf("cluster with figures: %+v", c.Nodes)
	}
	var plain struct {
		Nodes []clusterNode `json:"nodes"`
	}
	getJSON("/_sys/cluster", &plain)
	if len(plain.Nodes) != 1 || plain.Nodes[0].Figures != nil {
		t.Fatalf("cluster without ?figures: %+v", plain.Nodes)
	}
	if plain.Nodes[0].TxnVersion != kafka.TxnVersion {
		t.Fatalf("cluster: txnVersion %d, want this build's %d (the membership record carries it)", plain.Nodes[0].TxnVersion, kafka.TxnVersion)
	}
}

// scrapeMetrics sums each metric's samples on base's /metrics.
func scrapeMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

// TestClusterViewsAcrossNodes: two nodes on one etcd, auth on. Node a
// answers a read of a stream node b serves through /_sys/follow (the
// records, read from b with the caller's token), and the figures of both
// nodes; a token the other node refuses gets nothing from it.
func TestClusterViewsAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, _ := metatest.StartEmbedded(t)
	const admin, reader, scraper = "pmq_views_admin", "pmq_views_reader", "pmq_views_scraper"
	tokens := writeTokenFile(t, admin, reader, "read:/t/", scraper, "metrics")
	store := "file://" + t.TempDir()
	start := func(id string) (*Node, string) {
		addr, err := testproc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		n := startTestNode(t, ctx, t.TempDir(), nil, "--node-id", id, "--etcd-endpoints", e.Endpoints()[0],
			"--object-store", store, "--auth-tokens", tokens, "--http-addr", addr, "--advertise-url", "http://"+addr,
			"--seal-max-age", "1h") // b's record stays unflushed: its figures are not 0
		shutdownAtEnd(t, n)
		return n, "http://" + addr
	}
	_, aURL := start("a")
	_, bURL := start("b")
	send := func(method, url, token, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if method != http.MethodGet {
			req.Header.Set("Content-Type", "text/plain")
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if r, b := send("PUT", bURL+"/t/s", admin, ""); r.StatusCode != 201 || r.Header.Get("Pico-Owner") != "b" {
		t.Fatalf("create on b: %d %s owner %q", r.StatusCode, b, r.Header.Get("Pico-Owner"))
	}
	if r, b := send("POST", bURL+"/t/s", admin, "on b"); r.StatusCode != 200 {
		t.Fatalf("append on b: %d %s", r.StatusCode, b)
	}

	// The stream's own URL on a redirects; the follow route reads it on b.
	if r, _ := send("GET", aURL+"/t/s?offset=0", reader, ""); r.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("a read on a non-owner: %d, want 307 (else this test proves nothing)", r.StatusCode)
	}
	r, body := send("GET", aURL+"/_sys/follow/t/s?offset=0", reader, "")
	if r.StatusCode != 200 || !strings.Contains(body, "on b") || r.Header.Get("Pico-Read-From") != "b" || r.Header.Get("Pico-Served-By") != "a" ||
		r.Header.Get("Pico-Next-Offset") != "1" {
		t.Fatalf("read through a: %d %s, read from %q served by %q next %q", r.StatusCode, body,
			r.Header.Get("Pico-Read-From"), r.Header.Get("Pico-Served-By"), r.Header.Get("Pico-Next-Offset"))
	}
	if r, b := send("GET", aURL+"/_sys/follow/t/s?offset=0", scraper, ""); r.StatusCode != http.StatusForbidden {
		t.Errorf("a metrics token through follow: %d %s, want 403", r.StatusCode, b)
	}

	var c struct {
		Nodes []clusterNode `json:"nodes"`
	}
	r, body = send("GET", aURL+"/_sys/cluster?figures=true", reader, "")
	if r.StatusCode != 200 || json.Unmarshal([]byte(body), &c) != nil || len(c.Nodes) != 2 {
		t.Fatalf("cluster with figures: %d %s", r.StatusCode, body)
	}
	for _, n := range c.Nodes {
		if n.Figures == nil || n.FiguresError != "" || n.Figures.NodeID != n.NodeID {
			t.Errorf("node %s: figures %+v, error %q", n.NodeID, n.Figures, n.FiguresError)
		}
		if n.NodeID == "b" && (n.Figures == nil || n.Figures.StreamsOwned != 1 || n.Figures.UnflushedBytes <= 0) {
			t.Errorf("node b's figures %+v, want its stream and its unflushed bytes", n.Figures)
		}
	}
}
