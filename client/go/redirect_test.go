package picomq_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// The redirect test runs a real two-node cluster: an etcd daemon (built
// from e2e/cmd/etcd, like the e2e tests do; PICOMQ_ETCD_BIN points at a
// prebuilt one) and two `picomq serve` nodes sharing it and a file object
// store. Each node sits behind a recording proxy, and each node advertises
// its proxy's URL, so the 307 a node answers for a stream owned by the other
// one points at the other proxy: the test sees both hops of a redirect.

// startEtcd runs a one-member etcd on loopback for the test.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := testproc.EtcdBinary(picomqs.Dir)
	if err != nil {
		t.Fatalf("building etcd: %v", err)
	}
	e := &testproc.Etcd{Bin: bin, Name: "sdk", DataDir: filepath.Join(t.TempDir(), "etcd"), DieWithParent: true}
	for _, a := range []*string{&e.ClientAddr, &e.PeerAddr} {
		if *a, err = freeAddr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Kill)
	return e.ClientAddr
}

// twoNodes starts a cluster of two nodes, each behind a proxy that is also
// its advertise URL. It returns the proxies of node a and node b.
func twoNodes(t *testing.T, protocol string) (*proxy, *proxy) {
	t.Helper()
	etcd := startEtcd(t)
	objects := "file://" + filepath.Join(t.TempDir(), "objects")
	var proxies []*proxy
	for _, id := range []string{"a", "b"} {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		px := newProxyTo(t)
		px.setTarget("http://" + addr)
		startTestServer(t, addr, "--protocol", protocol, "--node-id", "node-"+id,
			"--advertise-url", px.URL, "--etcd-endpoints", etcd, "--object-store", objects, "--lease-ttl", "3s")
		proxies = append(proxies, px)
	}
	// Wait until node b sees node a as a member (it redirects only to
	// live members).
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(proxies[1].URL + "/_sys/cluster")
		if err == nil {
			var v struct {
				Nodes []struct {
					NodeID string `json:"nodeId"`
				} `json:"nodes"`
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if len(v.Nodes) == 2 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("node b did not see two members within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return proxies[0], proxies[1]
}

// TestRedirectAcrossNodes: a client of node b works on a stream owned by
// node a. Node b answers 307 to node a; the SDK follows it with the same
// method, body and bearer token, then remembers the owner so later
// requests go straight there.
func TestRedirectAcrossNodes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol picomq.Protocol
		flag     string
	}{
		{"pico", picomq.ProtocolPico, "pico"},
		{"ds", picomq.ProtocolDurableStreams, "durable-streams"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 90*time.Second)
			pa, pb := twoNodes(t, tc.flag)
			const token = "s3cret-token"
			name := "/redirect/" + tc.name
			// Created through node a: node a owns the stream.
			ca := newClient(t, tc.protocol, pa.URL, picomq.WithToken(token))
			if _, err := ca.Stream(name).Create(ctx, "application/json", 0); err != nil {
				t.Fatal(err)
			}
			cb := newClient(t, tc.protocol, pb.URL, picomq.WithToken(token))
			sb := cb.Stream(name)
			// Ensuring the stream exists is answered by node b itself (it
			// teaches the handle the content type a Durable Streams
			// append needs, and no owner).
			if res, err := sb.Create(ctx, "application/json", 0); err != nil || res.Created {
				t.Fatalf("create through node b: %+v %v", res, err)
			}
			body := `{"hop":"redirected","n":1}`
			ack, err := sb.Append(ctx, picomq.AppendRecord{Body: []byte(body)})
			if err != nil {
				t.Fatal(err)
			}
			if ack.Next != cb.PositionAt(1) {
				t.Fatalf("ack %+v", ack)
			}

			// Hop 1 at node b: 307 to node a's advertise URL.
			var first seenRequest
			for _, r := range pb.requests() {
				if r.Method == http.MethodPost {
					first = r
				}
			}
			if first.Status != http.StatusTemporaryRedirect || !strings.HasPrefix(first.Header.Get("Location"), pa.URL) {
				t.Fatalf("node b answered the append %d, Location %q; want 307 to %s", first.Status, first.Header.Get("Location"), pa.URL)
			}
			// Hop 2 at node a: same token, same body.
			var second seenRequest
			for _, r := range pa.requests() {
				if r.Method == http.MethodPost {
					second = r
				}
			}
			if second.Status != http.StatusOK && second.Status != http.StatusNoContent {
				t.Fatalf("node a answered the redirected append %d", second.Status)
			}
			for hop, r := range []seenRequest{first, second} {
				if r.Auth != "Bearer "+token {
					t.Fatalf("hop %d carried Authorization %q", hop+1, r.Auth)
				}
				if !strings.Contains(string(r.Body), body) {
					t.Fatalf("hop %d carried body %q, want it to contain %q", hop+1, r.Body, body)
				}
			}

			// The owner is remembered: reads and a producer's batches go
			// to node a directly, still with the token.
			before := len(pb.requests())
			p, err := sb.NewProducer(picomq.ProducerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 2; i <= 20; i++ {
				if _, err := p.Send(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			page, err := sb.Read(ctx, cb.Beginning(), picomq.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Records) != 20 || string(page.Records[0].Body) != body {
				t.Fatalf("read back %d records, first %q", len(page.Records), page.Records[0].Body)
			}
			if n := len(pb.requests()); n != before {
				t.Fatalf("node b got %d more requests after the owner was known", n-before)
			}
			for _, r := range pa.requests() {
				if r.Auth != "Bearer "+token {
					t.Fatalf("%s %s reached node a with Authorization %q", r.Method, r.Path, r.Auth)
				}
			}

			// A fresh handle (no remembered owner) follows the redirect on
			// a read, too.
			cb2 := newClient(t, tc.protocol, pb.URL, picomq.WithToken(token))
			page, err = cb2.Stream(name).Read(ctx, cb2.Beginning(), picomq.ReadOptions{})
			if err != nil || len(page.Records) != 20 {
				t.Fatalf("fresh read through node b: %d records, %v", len(page.Records), err)
			}
			// Following is explicit and bounded: with redirects off, the
			// 307 is an error.
			cb3 := newClient(t, tc.protocol, pb.URL, picomq.WithToken(token), picomq.WithMaxRedirects(0))
			if _, err := cb3.Stream(name).Append(ctx, picomq.AppendRecord{Body: []byte(`{}`)}); err == nil {
				t.Fatal("an append through node b succeeded without following the redirect")
			}
		})
	}
}
