package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster harness: one etcd daemon, one MinIO and n `picomq serve`
// processes on loopback, all sharing the etcd and the bucket. Everything is
// black-box: nodes are driven over HTTP and killed with signals.

// Wire names of the cluster contract (issue 5). Kept here, not imported from
// sdk/wire, so the tests pin the contract independently of the server code.
const (
	hdrServedBy      = "Pico-Served-By"
	hdrOwner         = "Pico-Owner"
	hdrDurability    = "Pico-Durability"
	hdrProducerID    = "Pico-Producer-Id"
	hdrProducerEpoch = "Pico-Producer-Epoch"
	hdrProducerSeq   = "Pico-Producer-Seq"
	hdrDuplicate     = "Pico-Duplicate"
)

type clusterOpts struct {
	LeaseTTL   time.Duration // --lease-ttl; default 3s
	SealMaxAge time.Duration // --seal-max-age; default 200ms
	Extra      []string      // more serve flags for every node
	Token      string        // bearer token of the harness's own requests (auth-on clusters)
	Bin        string        // picomq binary; empty = the one TestMain built
	Kafka      bool          // give every node a Kafka listener (clusterNode.KafkaAddr)
	// KafkaHost, when set, is the host of every node's
	// --kafka-advertise-addr (its listener's port), which is then what
	// clusterNode.KafkaAddr holds.
	KafkaHost string
	// ObjectProxy puts a fault-injecting proxy (cluster.proxy) between
	// the nodes and MinIO.
	ObjectProxy bool
	// AdvertiseVia, when set, returns the URL node id advertises (and the
	// harness uses) for its listener at addr, e.g. a proxy in front of it
	// through which other nodes reach it; "" keeps http://addr.
	AdvertiseVia func(id, addr string) string
}

func (o *clusterOpts) defaults() {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 3 * time.Second
	}
	if o.SealMaxAge == 0 {
		o.SealMaxAge = 200 * time.Millisecond
	}
}

type cluster struct {
	t     testing.TB
	opts  clusterOpts
	etcd  *etcdServer
	minio *minioServer
	proxy *faultProxy // with clusterOpts.ObjectProxy: the nodes' way to MinIO
	nodes []*clusterNode
	// replicaBlockers: the proxies in front of the nodes (by node id) a
	// soak with the replica-partition fault puts there.
	replicaBlockers map[string]*replicaBlocker
}

// clusterNode is one picomq process of a cluster. proc.restart brings it
// back with the same node id, port and data dir.
type clusterNode struct {
	*proc
	ID        string
	token     string // sent by the harness's /_sys/cluster polls
	KafkaAddr string // the node's Kafka listener when clusterOpts.Kafka
}

// startCluster starts etcd, MinIO and n nodes named node-a, node-b, ... and
// waits until every node's /_sys/cluster lists all n members.
func startCluster(t testing.TB, n int, opts clusterOpts) *cluster {
	t.Helper()
	opts.defaults()
	c := &cluster{t: t, opts: opts, etcd: startEtcd(t), minio: startMinio(t)}
	if opts.ObjectProxy {
		c.proxy = startFaultProxy(t, c.minio.URL())
	}
	root := t.TempDir()
	for i := 0; i < n; i++ {
		id := "node-" + string(rune('a'+i))
		c.nodes = append(c.nodes, c.startNode(id, filepath.Join(root, id)))
	}
	c.waitMembers(c.nodes, 30*time.Second)
	return c
}

func (c *cluster) startNode(id, dataDir string) *clusterNode {
	c.t.Helper()
	addr := freeAddr(c.t)
	advertise := "http://" + addr
	if c.opts.AdvertiseVia != nil {
		if u := c.opts.AdvertiseVia(id, addr); u != "" {
			advertise = u
		}
	}
	kafkaAddr := "off"
	if c.opts.Kafka {
		kafkaAddr = freeAddr(c.t)
	}
	args := []string{"serve",
		"--node-id", id,
		"--data-dir", dataDir,
		"--http-addr", addr,
		"--advertise-url", advertise,
		"--kafka-addr", kafkaAddr,
		"--etcd-endpoints", c.etcd.Endpoint(),
		"--object-store", c.objectStoreURL(),
		"--lease-ttl", c.opts.LeaseTTL.String(),
		"--seal-max-age", c.opts.SealMaxAge.String(),
	}
	if c.opts.Kafka && c.opts.KafkaHost != "" {
		_, port, _ := net.SplitHostPort(kafkaAddr)
		kafkaAddr = net.JoinHostPort(c.opts.KafkaHost, port)
		args = append(args, "--kafka-advertise-addr", kafkaAddr)
	}
	args = append(args, c.opts.Extra...)
	p := startProc(c.t, &proc{t: c.t, name: id, URL: advertise, dataDir: dataDir, args: args, env: c.minio.Env(), bin: c.opts.Bin,
		logs: &syncBuffer{}})
	cn := &clusterNode{proc: p, ID: id, token: c.opts.Token}
	if c.opts.Kafka {
		cn.KafkaAddr = kafkaAddr
	}
	return cn
}

// objectStoreURL is the nodes' --object-store: MinIO, or the proxy to it.
func (c *cluster) objectStoreURL() string {
	if c.proxy != nil {
		return c.minio.objectStoreURLVia(c.proxy.URL())
	}
	return c.minio.ObjectStoreURL()
}

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// kafkaSeeds are the Kafka addresses of the nodes (clusterOpts.Kafka).
func (c *cluster) kafkaSeeds() []string {
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, n.KafkaAddr)
	}
	return seeds
}

// node returns the cluster node with the given id.
func (c *cluster) node(id string) *clusterNode {
	for _, n := range c.nodes {
		if n.ID == id {
			return n
		}
	}
	c.t.Fatalf("no node %q in the cluster", id)
	return nil
}

type clusterView struct {
	Nodes []struct {
		NodeID       string `json:"nodeId"`
		AdvertiseURL string `json:"advertiseUrl"`
	} `json:"nodes"`
	Self string `json:"self"`
}

func getClusterView(ctx context.Context, n *clusterNode) (clusterView, error) {
	var v clusterView
	var auth []string
	if n.token != "" {
		auth = []string{"Authorization", "Bearer " + n.token}
	}
	r, err := send(ctx, noRedirect, "GET", n.URL+"/_sys/cluster", nil, auth...)
	if err != nil {
		return v, err
	}
	if r.Status != 200 {
		return v, fmt.Errorf("GET /_sys/cluster: %d %s", r.Status, bytes.TrimSpace(r.Body))
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		return v, fmt.Errorf("GET /_sys/cluster: %q: %v", r.Body, err)
	}
	return v, nil
}

// waitMembers polls /_sys/cluster on each of the given nodes until it
// reports itself as self and lists exactly the given members with their
// advertise URLs.
func (c *cluster) waitMembers(members []*clusterNode, within time.Duration) {
	c.t.Helper()
	want := map[string]string{}
	for _, m := range members {
		want[m.ID] = m.URL
	}
	for _, n := range members {
		var last string
		ok := pollUntil(within, 50*time.Millisecond, func() bool {
			v, err := getClusterView(context.Background(), n)
			if err != nil {
				last = err.Error()
				return false
			}
			got := map[string]string{}
			for _, m := range v.Nodes {
				got[m.NodeID] = strings.TrimSuffix(m.AdvertiseURL, "/")
			}
			last = fmt.Sprintf("self=%q nodes=%v", v.Self, got)
			if v.Self != n.ID || len(got) != len(want) {
				return false
			}
			for id, u := range want {
				if got[id] != u {
					return false
				}
			}
			return true
		})
		if !ok {
			c.t.Fatalf("%s: /_sys/cluster did not list %v within %v; last: %s", n.ID, want, within, last)
		}
	}
}

// pollUntil calls cond every interval until it returns true or the time
// is up; it reports whether cond became true.
func pollUntil(within, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}

// HTTP clients. transport keeps enough idle connections per node that
// dozens of producer goroutines reuse connections instead of churning
// through ephemeral ports.
var transport = &http.Transport{
	Proxy:               nil, // loopback only, never through a proxy
	DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	MaxIdleConns:        512,
	MaxIdleConnsPerHost: 128,
	IdleConnTimeout:     30 * time.Second,
}

// noRedirect returns 307s to the caller: for asserting the routing step.
var noRedirect = &http.Client{
	Transport:     transport,
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// follow follows redirects like a browser or curl -L. Go's client re-sends
// a 307'd POST with the same method, headers and body when the request has
// GetBody, which http.NewRequest sets for a *bytes.Reader body (proven by
// TestRedirectClientResendsBody). Two hops at most: a node redirects to the
// owner, and the owner never redirects again except during a handover.
var follow = &http.Client{
	Transport: transport,
	Timeout:   20 * time.Second,
	CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > 2 {
			return fmt.Errorf("more than 2 redirects: %s", redirectChain(req))
		}
		return nil
	},
}

func redirectChain(req *http.Request) string {
	var hops []string
	for r := req; r != nil; {
		hops = append([]string{r.URL.Host}, hops...)
		if r.Response == nil {
			break
		}
		r = r.Response.Request
	}
	return strings.Join(hops, " -> ")
}

// reply is a response plus where it came from.
type reply struct {
	response
	Hops     int    // redirects followed
	FinalURL string // URL of the request that produced this response
}

func (r reply) servedBy() string { return r.Header.Get(hdrServedBy) }

// send issues one request with client c. The body is a *bytes.Reader so a
// following client can re-send it on a 307.
func send(ctx context.Context, c *http.Client, method, u string, body []byte, headers ...string) (reply, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	out := reply{response: response{Status: resp.StatusCode, Header: resp.Header, Body: b}, FinalURL: resp.Request.URL.String()}
	for r := resp.Request; r.Response != nil; r = r.Response.Request {
		out.Hops++
	}
	return out, nil
}

func mustSend(t testing.TB, c *http.Client, method, u string, body []byte, headers ...string) reply {
	t.Helper()
	r, err := send(context.Background(), c, method, u, body, headers...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	return r
}

// checkRedirect asserts a 307 to owner's advertise URL with the same path
// and query as the request (an absolute Location).
func checkRedirect(t testing.TB, r reply, owner *clusterNode, pathAndQuery, what string) {
	t.Helper()
	if err := redirectError(r, owner.URL+pathAndQuery); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func redirectError(r reply, wantLocation string) error {
	if r.Status != http.StatusTemporaryRedirect {
		return fmt.Errorf("status %d, want 307; body %s", r.Status, bytes.TrimSpace(r.Body))
	}
	if loc := r.Header.Get("Location"); loc != wantLocation {
		return fmt.Errorf("Location %q, want %q", loc, wantLocation)
	}
	return nil
}

// unavailableError checks a 503 is the contract's "not now, retry": a
// Retry-After in seconds and the JSON error code unavailable.
func unavailableError(r reply) error {
	if r.Status != http.StatusServiceUnavailable {
		return fmt.Errorf("status %d, want 503", r.Status)
	}
	ra := r.Header.Get("Retry-After")
	if n, err := strconv.Atoi(ra); err != nil || n < 0 {
		return fmt.Errorf("503 with Retry-After %q, want seconds", ra)
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Body, &e); err != nil || e.Error.Code != "unavailable" || e.Error.Message == "" {
		return fmt.Errorf("503 body %q, want {\"error\":{\"code\":\"unavailable\",\"message\":…}}", bytes.TrimSpace(r.Body))
	}
	return nil
}

// record is one record as read back.
type record struct {
	Offset int64
	Value  string
}

// readStreamFrom reads a stream from offset 0 to its end through base
// with client c and checks the offsets are contiguous from 0; with gaps,
// they may also jump forward (a gap a takeover of a `local` stream leaves
// after its owner was lost, docs/durability.md), but never back, and
// Pico-Next-Offset must move past the records each page returned.
// servedBy collects the Pico-Served-By of every page.
func readStreamFrom(ctx context.Context, c *http.Client, base, name string, gaps bool) (recs []record, servedBy map[string]int, err error) {
	servedBy = map[string]int{}
	for off, pages := int64(0), 0; ; pages++ {
		if pages > 100000 {
			return nil, nil, fmt.Errorf("read %s: no end after %d pages", name, pages)
		}
		r, err := send(ctx, c, "GET", fmt.Sprintf("%s%s?offset=%d&limit=10000", base, name, off), nil)
		if err != nil {
			return nil, nil, err
		}
		if r.Status != 200 {
			return nil, nil, fmt.Errorf("read %s at %d via %s: status %d %s", name, off, base, r.Status, bytes.TrimSpace(r.Body))
		}
		servedBy[r.servedBy()]++
		var page []jsonRecord
		if err := json.Unmarshal(r.Body, &page); err != nil {
			return nil, nil, fmt.Errorf("read %s: %q: %v", name, r.Body, err)
		}
		pos := off
		for _, rec := range page {
			if rec.Offset < pos || (rec.Offset > pos && !gaps) {
				return nil, nil, fmt.Errorf("read %s: record at offset %d, expected %d (gap or reorder)", name, rec.Offset, pos)
			}
			if rec.Value == nil {
				return nil, nil, fmt.Errorf("read %s: null value at offset %d", name, rec.Offset)
			}
			recs = append(recs, record{rec.Offset, *rec.Value})
			pos = rec.Offset + 1
		}
		next, perr := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
		if perr != nil || next < pos || (next > pos && !gaps) {
			return nil, nil, fmt.Errorf("read %s: Pico-Next-Offset %q after a page that ends at %d", name, r.Header.Get("Pico-Next-Offset"), pos)
		}
		if r.Header.Get("Pico-Up-To-Date") == "true" {
			return recs, servedBy, nil
		}
		if next == off {
			return nil, nil, fmt.Errorf("read %s: empty page at %d and not up to date", name, off)
		}
		off = next
	}
}

func mustReadStream(t testing.TB, base, name string) []record {
	t.Helper()
	return mustReadStreamFrom(t, base, name, false)
}

// mustReadStreamFrom is readStreamFrom or a failed test.
func mustReadStreamFrom(t testing.TB, base, name string, gaps bool) []record {
	t.Helper()
	recs, _, err := readStreamFrom(context.Background(), follow, base, name, gaps)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// ack is one acknowledged append as the client saw it.
type ack struct {
	Offset   int64
	Value    string
	At       time.Time // when the 200 arrived
	ServedBy string
}

// percentile is the nearest-rank percentile of ds (p in (0,100]).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}

// writeReport writes key=value lines to $PICOMQ_REPORT_DIR/name when that
// variable is set (CI and `make cluster-report` collect them).
func writeReport(t testing.TB, name string, kv [][2]string) {
	t.Helper()
	dir := os.Getenv("PICOMQ_REPORT_DIR")
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("report dir: %v", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# %s, %s\n", t.Name(), time.Now().UTC().Format(time.RFC3339))
	for _, e := range kv {
		fmt.Fprintf(&b, "%s=%s\n", e[0], e[1])
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatalf("write report: %v", err)
	}
	t.Logf("report written to %s", path)
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// errorList collects failures from goroutines and reports the first few:
// under load one bug can produce thousands of identical errors.
type errorList struct {
	mu   sync.Mutex
	errs []string
	n    int
}

func (e *errorList) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.errs) < 20 {
		e.errs = append(e.errs, fmt.Sprintf(format, args...))
	}
}

func (e *errorList) check(t testing.TB, what string) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n > 0 {
		t.Fatalf("%s: %d errors, first ones:\n  %s", what, e.n, strings.Join(e.errs, "\n  "))
	}
}
