package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Cluster e2e tests (issue 5): three real `picomq serve` processes sharing
// one etcd daemon and one MinIO bucket, driven over HTTP, killed with
// SIGKILL. See docs/operations.md for what they prove and how to read the
// takeover report.

const (
	// retryBackoff is how long a test client waits after a failed or 503'd
	// request. It deliberately ignores Retry-After (whole seconds) so the
	// takeover time is measured at a useful resolution.
	retryBackoff = 25 * time.Millisecond
	// lossWindowIntervals bounds the local-durability loss window in seal
	// intervals: a record acked at t is in object storage by the end of the
	// first flush that starts after t (≤ one interval) plus upload + commit.
	lossWindowIntervals = 5
)

// TestRedirectClientResendsBody pins the client behaviour the cluster tests
// rely on: Go's http.Client follows a 307 for a POST with the same method,
// headers, query and body when the request body is a *bytes.Reader (GetBody
// set), and hands the 307 back when it cannot replay the body.
func TestRedirectClientResendsBody(t *testing.T) {
	type seen struct {
		method, query, body, producer, ct string
	}
	got := make(chan seen, 4)
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RawQuery, string(b), r.Header.Get(hdrProducerID), r.Header.Get("Content-Type")}
		w.Header().Set(hdrServedBy, "owner")
		w.WriteHeader(200)
	}))
	defer owner.Close()
	router := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set(hdrServedBy, "router")
		http.Redirect(w, r, owner.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer router.Close()

	r := mustSend(t, follow, "POST", router.URL+"/a/b?x=1&y=2", []byte("payload"),
		"Content-Type", "text/plain", hdrProducerID, "p1")
	if r.Status != 200 || r.servedBy() != "owner" || r.Hops != 1 || !strings.HasPrefix(r.FinalURL, owner.URL) {
		t.Fatalf("followed POST: status %d served by %q after %d hops at %s", r.Status, r.servedBy(), r.Hops, r.FinalURL)
	}
	if s := <-got; s != (seen{"POST", "x=1&y=2", "payload", "p1", "text/plain"}) {
		t.Fatalf("owner saw %+v after the redirect", s)
	}

	// Without GetBody (a plain io.Reader) the client cannot replay the
	// body and returns the 307 itself: why send() uses bytes.Reader.
	req, _ := http.NewRequest("POST", router.URL+"/a/b", io.MultiReader(strings.NewReader("payload")))
	resp, err := follow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("POST without GetBody: status %d, want the 307 back", resp.StatusCode)
	}

	r = mustSend(t, noRedirect, "POST", router.URL+"/a/b?x=1", []byte("payload"))
	if r.Status != 307 || r.Header.Get("Location") != owner.URL+"/a/b?x=1" || r.servedBy() != "router" {
		t.Fatalf("noRedirect: %d %v", r.Status, r.Header)
	}
	select {
	case s := <-got:
		t.Fatalf("noRedirect client reached the owner: %+v", s)
	default:
	}
}

// Scenario 1: create on A; append and read through B and C (307s followed
// by the client, data identical); history already in object storage is
// served by C itself, without a redirect.
func TestClusterRouting(t *testing.T) {
	c := startCluster(t, 3, clusterOpts{})
	a, b, cn := c.nodes[0], c.nodes[1], c.nodes[2]
	const name = "/route/orders/1042"

	wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+name, nil, "Content-Type", "text/plain").response, 201, "create on A")
	r := mustSend(t, noRedirect, "HEAD", a.URL+name, nil)
	wantStatus(t, r.response, 200, "HEAD on the owner")
	if r.Header.Get(hdrOwner) != a.ID || r.servedBy() != a.ID {
		t.Fatalf("HEAD on A: Pico-Owner %q, Pico-Served-By %q; want %s for both", r.Header.Get(hdrOwner), r.servedBy(), a.ID)
	}

	// The routing step's answer for every method, path and query shape.
	for _, via := range []*clusterNode{b, cn} {
		for _, q := range []struct{ method, pathQuery string }{
			{"POST", name},
			{"POST", name + "?trace=1"},
			{"GET", name + "?offset=0"},
			{"GET", name + "?offset=0&limit=7&encoding=base64"},
			{"HEAD", name},
			{"DELETE", name},
		} {
			var body []byte
			if q.method == "POST" {
				body = []byte("must not be written by " + via.ID)
			}
			r := mustSend(t, noRedirect, q.method, via.URL+q.pathQuery, body, "Content-Type", "text/plain")
			checkRedirect(t, r, a, q.pathQuery, q.method+" "+q.pathQuery+" via "+via.ID)
			if r.servedBy() != via.ID {
				t.Fatalf("%s %s via %s: 307 carries Pico-Served-By %q", q.method, q.pathQuery, via.ID, r.servedBy())
			}
		}
	}
	// Answered where asked: a missing stream, and create of an existing one.
	r = mustSend(t, noRedirect, "GET", b.URL+"/route/missing", nil)
	wantStatus(t, r.response, 404, "GET of a missing stream via B")
	assertErrorBody(t, r.response, "stream_not_found")
	wantStatus(t, mustSend(t, noRedirect, "PUT", b.URL+name, nil, "Content-Type", "text/plain").response, 200, "identical create via B")
	wantStatus(t, mustSend(t, noRedirect, "PUT", cn.URL+name, nil, "Content-Type", "application/json").response, 409, "conflicting create via C")

	// Appends through B and C land on A at consecutive offsets.
	var sent []string
	for i := 0; i < 40; i++ {
		via := []*clusterNode{b, cn}[i%2]
		v := fmt.Sprintf("record %d via %s", i, via.ID)
		r := mustSend(t, follow, "POST", via.URL+name, []byte(v), "Content-Type", "text/plain")
		wantStatus(t, r.response, 200, "append via "+via.ID)
		if r.Header.Get("Pico-Offset") != strconv.Itoa(i) || r.servedBy() != a.ID || r.Hops != 1 {
			t.Fatalf("append %d via %s: Pico-Offset %q, served by %q after %d hops; want %d, %s, 1",
				i, via.ID, r.Header.Get("Pico-Offset"), r.servedBy(), r.Hops, i, a.ID)
		}
		sent = append(sent, v)
	}
	for _, via := range []*clusterNode{b, cn, a} {
		recs := mustReadStream(t, via.URL, name)
		if err := sameValues(recs, sent); err != nil {
			t.Fatalf("read via %s: %v", via.ID, err)
		}
		r := mustSend(t, follow, "HEAD", via.URL+name, nil)
		if r.Status != 200 || r.Header.Get(hdrOwner) != a.ID || r.Header.Get("Pico-Next-Offset") != "40" {
			t.Fatalf("HEAD via %s: %d, Pico-Owner %q, Pico-Next-Offset %q", via.ID, r.Status, r.Header.Get(hdrOwner), r.Header.Get("Pico-Next-Offset"))
		}
	}

	// History from any node: once A has uploaded everything, C serves the
	// old offsets itself (no redirect), and only the live tail is A's.
	if !pollUntil(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, a.URL, "picomq_unflushed_bytes") == 0 }) {
		t.Fatalf("A still has %v unflushed bytes after 20s", metric(t, a.URL, "picomq_unflushed_bytes"))
	}
	// C may learn of the upload a little later (the contract says "may be
	// served"): poll on the last record; the watermark only moves forward,
	// so once C serves it, it serves everything below it.
	var hist reply
	var lastErr error
	lastQ := fmt.Sprintf("%s?offset=%d", name, len(sent)-1)
	ok := pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
		hist, lastErr = send(context.Background(), noRedirect, "GET", cn.URL+lastQ, nil)
		if lastErr != nil {
			return false
		}
		if hist.Status == 307 {
			lastErr = redirectError(hist, a.URL+lastQ)
			return false // C has not seen the upload yet
		}
		return true
	})
	if !ok {
		t.Fatalf("C never served uploaded history itself within 10s of the upload: %v", lastErr)
	}
	wantStatus(t, hist.response, 200, "history read on C")
	if hist.servedBy() != cn.ID || hist.Hops != 0 {
		t.Fatalf("history read on C: served by %q after %d hops, want %s without redirect", hist.servedBy(), hist.Hops, cn.ID)
	}
	// Page through the whole uploaded history on C: every page is C's own.
	var hrecs []record
	for off, pages := 0, 0; off < len(sent); pages++ {
		if pages > len(sent) {
			t.Fatalf("history on C: no progress at offset %d", off)
		}
		r := mustSend(t, noRedirect, "GET", fmt.Sprintf("%s%s?offset=%d", cn.URL, name, off), nil)
		wantStatus(t, r.response, 200, fmt.Sprintf("uploaded history at offset %d on C", off))
		if r.servedBy() != cn.ID {
			t.Fatalf("history at %d on C served by %q", off, r.servedBy())
		}
		var page []jsonRecord
		if err := json.Unmarshal(r.Body, &page); err != nil || len(page) == 0 {
			t.Fatalf("history at %d on C: %q %v", off, r.Body, err)
		}
		for _, rec := range page {
			if rec.Offset != int64(off) || rec.Value == nil {
				t.Fatalf("history on C: offset %d where %d was expected", rec.Offset, off)
			}
			hrecs = append(hrecs, record{rec.Offset, *rec.Value})
			off++
		}
	}
	if err := sameValues(hrecs, sent); err != nil {
		t.Fatalf("history on C: %v", err)
	}
	// The tail (offset 40 = next offset, not uploaded) is the owner's.
	r = mustSend(t, noRedirect, "GET", cn.URL+name+"?offset=40", nil)
	checkRedirect(t, r, a, name+"?offset=40", "GET of the tail via C")
}

// sameValues checks recs hold exactly want, in order.
func sameValues(recs []record, want []string) error {
	if len(recs) != len(want) {
		return fmt.Errorf("%d records, want %d", len(recs), len(want))
	}
	for i := range recs {
		if recs[i].Value != want[i] {
			return fmt.Errorf("offset %d: %q, want %q", i, recs[i].Value, want[i])
		}
	}
	return nil
}

// killStream is one stream of the kill -9 scenario and what its producer
// saw acknowledged.
type killStream struct {
	name       string
	durability string
	mu         sync.Mutex
	acks       []ack
	sent       int // values 0..sent-1 were sent (acked or not)
}

func (s *killStream) snapshot() []ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ack(nil), s.acks...)
}

func (s *killStream) count(pred func(ack) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.acks {
		if pred(a) {
			n++
		}
	}
	return n
}

// Scenario 2: kill -9 the owner of 50 streams under producer load through
// the other nodes. Every stream becomes writable on a survivor; object
// streams lose no acknowledged record, local streams lose at most the
// un-uploaded tail (measured); the restarted node rejoins without
// resurrecting its old ownership. Reports takeover time p50/p99.
func TestClusterOwnerKill(t *testing.T) {
	opts := clusterOpts{LeaseTTL: 3 * time.Second, SealMaxAge: 200 * time.Millisecond}
	c := startCluster(t, 3, opts)
	a := c.nodes[0]
	survivors := c.nodes[1:]
	const nStreams = 50
	streams := make([]*killStream, nStreams)
	for i := range streams {
		s := &killStream{name: fmt.Sprintf("/kill/s%02d", i), durability: "local"}
		if i%2 == 0 {
			s.durability = "object"
		}
		streams[i] = s
		r := mustSend(t, noRedirect, "PUT", a.URL+s.name, nil, "Content-Type", "text/plain", hdrDurability, s.durability)
		wantStatus(t, r.response, 201, "create "+s.name+" on A")
	}

	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		errs     errorList
		failures atomic.Int64 // connection errors and 503s while ownership moves
	)
	for i, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				via := survivors[(i+n)%len(survivors)]
				v := fmt.Sprintf("%s#%d", s.name, n)
				s.mu.Lock()
				s.sent = n + 1
				s.mu.Unlock()
				r, err := send(context.Background(), follow, "POST", via.URL+s.name, []byte(v), "Content-Type", "text/plain")
				switch {
				case err != nil:
					failures.Add(1) // outcome unknown: the next value is a new one
					time.Sleep(retryBackoff)
					continue
				case r.Status == 503:
					failures.Add(1)
					if err := unavailableError(r); err != nil {
						errs.add("%s via %s: %v", s.name, via.ID, err)
					}
					time.Sleep(retryBackoff)
					continue
				case r.Status != 200:
					errs.add("%s via %s: status %d %s", s.name, via.ID, r.Status, bytes.TrimSpace(r.Body))
					time.Sleep(retryBackoff)
					continue
				}
				off, err := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
				if err != nil || r.servedBy() == "" {
					errs.add("%s: ack without Pico-Offset/Pico-Served-By: %v", s.name, r.Header)
					continue
				}
				s.mu.Lock()
				s.acks = append(s.acks, ack{Offset: off, Value: v, At: time.Now(), ServedBy: r.servedBy()})
				s.mu.Unlock()
				time.Sleep(50 * time.Millisecond) // pacing: 50 streams ≈ 1000 appends/s at most
			}
		}()
	}
	stopProducers := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer stopProducers()

	// Load first: every stream has acks, and several flushes have run so
	// there is both uploaded and un-uploaded data at the kill.
	loadStart := time.Now()
	if !pollUntil(30*time.Second, 20*time.Millisecond, func() bool {
		if time.Since(loadStart) < 5*opts.SealMaxAge {
			return false
		}
		for _, s := range streams {
			if s.count(func(ack) bool { return true }) < 5 {
				return false
			}
		}
		return true
	}) {
		stopProducers()
		errs.check(t, "producers before the kill")
		t.Fatal("streams did not reach 5 acknowledged appends each within 30s")
	}
	errs.check(t, "producers before the kill")

	killAt := time.Now()
	a.Kill()
	t.Logf("killed %s (SIGKILL) at %s", a.ID, killAt.Format("15:04:05.000"))
	onSurvivor := func(x ack) bool { return x.ServedBy != a.ID }

	// Every stream becomes writable again on a surviving node.
	writable := func() []string {
		var missing []string
		for _, s := range streams {
			if s.count(onSurvivor) < 5 {
				missing = append(missing, s.name)
			}
		}
		return missing
	}
	if !pollUntil(10*opts.LeaseTTL, 20*time.Millisecond, func() bool { return len(writable()) == 0 }) {
		missing := writable()
		stopProducers()
		errs.check(t, "producers after the kill")
		t.Fatalf("%d streams not writable on a survivor %v after the kill: %v", len(missing), 10*opts.LeaseTTL, missing)
	}
	stopProducers()
	errs.check(t, "producers")

	// Takeover time: kill → first acknowledged append on the new owner.
	var takeover []time.Duration
	for _, s := range streams {
		for _, x := range s.snapshot() {
			if onSurvivor(x) {
				takeover = append(takeover, x.At.Sub(killAt))
				break
			}
		}
	}
	p50, p99, pmax := percentile(takeover, 50), percentile(takeover, 99), percentile(takeover, 100)
	ratio := float64(p99) / float64(opts.LeaseTTL)
	t.Logf("takeover (kill -9 → first ack on the new owner) over %d streams: p50 %v, p99 %v, max %v; lease TTL %v; p99/TTL = %.2f (target ≤ 2, asserted ≤ 3); %d failed or 503'd attempts while moving",
		len(takeover), p50.Round(time.Millisecond), p99.Round(time.Millisecond), pmax.Round(time.Millisecond), opts.LeaseTTL, ratio, failures.Load())

	// Durability across the takeover, read through a survivor.
	var lost []lossWindow
	logs := map[string][]record{}
	for _, s := range streams {
		// Only a `local` stream may have a gap: what its lost owner had
		// reserved (docs/durability.md); `object` offsets need none.
		recs := mustReadStreamFrom(t, survivors[0].URL, s.name, s.durability == "local")
		lw, err := checkKillStream(s, a.ID, killAt, recs)
		if err != nil {
			// Reported, and the test goes on: the rejoin checks below
			// are independent of this stream's loss.
			t.Errorf("%s (created with %s: %s): %v", s.name, hdrDurability, s.durability, err)
		}
		if lw.count > 0 {
			lost = append(lost, lw)
		}
		logs[s.name] = recs
	}
	var lostRecords int
	var window, newestLost time.Duration
	for _, l := range lost {
		lostRecords += l.count
		window = max(window, l.oldest)
		newestLost = max(newestLost, l.newest)
	}
	bound := lossWindowIntervals * opts.SealMaxAge
	t.Logf("local-durability loss: %d acked records lost in %d of %d local streams; oldest lost ack %v before the kill, newest %v (bound %d × seal-max-age = %v)",
		lostRecords, len(lost), nStreams/2, window.Round(time.Millisecond), newestLost.Round(time.Millisecond), lossWindowIntervals, bound)
	writeReport(t, "cluster-takeover.txt", [][2]string{
		{"streams", strconv.Itoa(len(takeover))},
		{"lease_ttl_ms", ms(opts.LeaseTTL)},
		{"seal_max_age_ms", ms(opts.SealMaxAge)},
		{"takeover_p50_ms", ms(p50)},
		{"takeover_p99_ms", ms(p99)},
		{"takeover_max_ms", ms(pmax)},
		{"takeover_p99_over_lease_ttl", strconv.FormatFloat(ratio, 'f', 2, 64)},
		{"attempts_failed_or_503_while_moving", strconv.FormatInt(failures.Load(), 10)},
		{"local_lost_acked_records", strconv.Itoa(lostRecords)},
		{"local_streams_with_loss", strconv.Itoa(len(lost))},
		{"local_loss_window_ms", ms(window)},
		{"local_loss_window_bound_ms", ms(bound)},
	})
	if window > bound {
		t.Errorf("local-durability loss window %v exceeds %d seal intervals (%v)", window, lossWindowIntervals, bound)
	}
	if p99 > 3*opts.LeaseTTL {
		t.Errorf("takeover p99 %v exceeds 3 × lease TTL (%v)", p99, 3*opts.LeaseTTL)
	}

	// The survivors see A gone, and each took over some of its streams.
	c.waitMembers(survivors, 3*opts.LeaseTTL)
	owner := map[string]*clusterNode{}
	perOwner := map[string]int{}
	for _, s := range streams {
		r := mustSend(t, follow, "HEAD", survivors[0].URL+s.name, nil)
		wantStatus(t, r.response, 200, "HEAD "+s.name)
		id := r.Header.Get(hdrOwner)
		if id == a.ID || (id != survivors[0].ID && id != survivors[1].ID) {
			t.Fatalf("%s: Pico-Owner %q after the kill, want a survivor", s.name, id)
		}
		owner[s.name] = c.node(id)
		perOwner[id]++
	}
	t.Logf("owners after takeover: %v", perOwner)
	for _, n := range survivors {
		if perOwner[n.ID] == 0 {
			t.Errorf("no stream was taken over by %s: takeover does not spread (%v)", n.ID, perOwner)
		}
	}

	// A comes back on the same data dir. It rejoins, redirects every
	// taken-over stream to its new owner and writes none of them.
	a.restart()
	c.waitMembers(c.nodes, 30*time.Second)
	for _, s := range streams {
		o := owner[s.name]
		for _, method := range []string{"POST", "HEAD"} {
			var last reply
			ok := pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
				var err error
				var body []byte
				if method == "POST" {
					body = []byte("stale owner must not write this")
				}
				last, err = send(context.Background(), noRedirect, method, a.URL+s.name, body, "Content-Type", "text/plain")
				if err != nil {
					t.Fatalf("%s %s on restarted A: %v", method, s.name, err)
				}
				if last.Status == 200 {
					t.Fatalf("%s %s: the restarted node served it itself (status 200, Pico-Offset %q); it was taken over by %s",
						method, s.name, last.Header.Get("Pico-Offset"), o.ID)
				}
				return last.Status != 503
			})
			if !ok {
				t.Fatalf("%s %s on restarted A: still 503 after 10s", method, s.name)
			}
			checkRedirect(t, last, o, s.name, method+" "+s.name+" on the restarted node")
		}
		// Appends through A reach the new owner.
		for k := 0; k < 3; k++ {
			v := fmt.Sprintf("%s#after-restart-%d", s.name, k)
			r := mustSend(t, follow, "POST", a.URL+s.name, []byte(v), "Content-Type", "text/plain")
			wantStatus(t, r.response, 200, "append via restarted A")
			off, _ := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
			want := int64(0)
			if l := logs[s.name]; len(l) > 0 {
				want = l[len(l)-1].Offset + 1
			}
			if r.servedBy() != o.ID || off != want {
				t.Fatalf("%s: append via A served by %q at offset %d, want %s at %d", s.name, r.servedBy(), off, o.ID, want)
			}
			logs[s.name] = append(logs[s.name], record{off, v})
		}
	}
	// Whatever A recovered from its WAL, it settles (uploads or drops it)
	// and none of it reaches the streams it no longer owns: every node
	// reads exactly the post-takeover logs plus the appends above.
	if !pollUntil(20*time.Second, 50*time.Millisecond, func() bool { return metric(t, a.URL, "picomq_unflushed_bytes") == 0 }) {
		t.Fatalf("restarted A keeps %v unflushed bytes after 20s (stale data it can neither commit nor drop?)", metric(t, a.URL, "picomq_unflushed_bytes"))
	}
	for _, s := range streams {
		for _, via := range c.nodes {
			recs := mustReadStreamFrom(t, via.URL, s.name, s.durability == "local")
			if !equalRecords(recs, logs[s.name]) {
				t.Fatalf("%s read via %s after A rejoined: %d records differ from the %d expected (stale owner committed something?)\n got: %v\nwant: %v",
					s.name, via.ID, len(recs), len(logs[s.name]), summarize(recs), summarize(logs[s.name]))
			}
		}
	}
}

// lossWindow describes the acknowledged records of one local stream that
// the kill took away: how many, and how long before the kill they were
// acknowledged.
type lossWindow struct {
	count          int
	oldest, newest time.Duration
}

// checkKillStream checks one stream's log after the takeover against what
// its producer saw acknowledged.
func checkKillStream(s *killStream, killed string, killAt time.Time, recs []record) (lossWindow, error) {
	var lw lossWindow
	s.mu.Lock()
	acks, sent := append([]ack(nil), s.acks...), s.sent
	s.mu.Unlock()
	at := map[string]int64{}
	for _, r := range recs {
		idx, ok := strings.CutPrefix(r.Value, s.name+"#")
		n, err := strconv.Atoi(idx)
		if !ok || err != nil || n < 0 || n >= sent {
			return lw, fmt.Errorf("offset %d holds %q, which the producer never sent", r.Offset, r.Value)
		}
		if prev, dup := at[r.Value]; dup {
			return lw, fmt.Errorf("value %q at offsets %d and %d", r.Value, prev, r.Offset)
		}
		at[r.Value] = r.Offset
	}
	byOffset := make(map[int64]string, len(recs))
	for _, r := range recs {
		byOffset[r.Offset] = r.Value
	}
	// Offsets may have a gap where the takeover left one (the lost
	// owner's reservation, docs/durability.md): look records up by offset.
	present := func(x ack) bool { v, ok := byOffset[x.Offset]; return ok && v == x.Value }
	var before []ack
	for _, x := range acks {
		if x.ServedBy != killed {
			if !present(x) {
				return lw, fmt.Errorf("ack of %q at offset %d by the new owner %s is lost", x.Value, x.Offset, x.ServedBy)
			}
			continue
		}
		before = append(before, x)
	}
	kept := 0
	for kept < len(before) && present(before[kept]) {
		kept++
	}
	for _, x := range before[kept:] {
		if present(x) {
			return lw, fmt.Errorf("acked %q at offset %d survived although an earlier ack (%q at %d) was lost: a hole, not a lost tail",
				x.Value, x.Offset, before[kept].Value, before[kept].Offset)
		}
		if off, ok := at[x.Value]; ok {
			return lw, fmt.Errorf("acked %q at offset %d reappeared at offset %d", x.Value, x.Offset, off)
		}
	}
	if lostN := len(before) - kept; lostN > 0 {
		if s.durability == "object" {
			return lw, fmt.Errorf("%d acknowledged records lost (first: %q at offset %d, acked %v before the kill) on an object-durability stream",
				lostN, before[kept].Value, before[kept].Offset, killAt.Sub(before[kept].At).Round(time.Millisecond))
		}
		lw = lossWindow{count: lostN, oldest: killAt.Sub(before[kept].At), newest: killAt.Sub(before[len(before)-1].At)}
	}
	return lw, nil
}

func equalRecords(a, b []record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func summarize(recs []record) string {
	if len(recs) <= 6 {
		return fmt.Sprint(recs)
	}
	return fmt.Sprintf("%v … %v", recs[:3], recs[len(recs)-3:])
}

// idemStream is one stream of the drain scenario: an idempotent producer
// (one id, epoch 0, seq = request number) and a reader that follows it.
type idemStream struct {
	name, producerID, durability string

	mu       sync.Mutex
	acks     []ack // index = producer seq
	dups     int   // acks flagged Pico-Duplicate (a retry whose first try was written)
	read     []record
	readerAt int64 // reader position (next offset to read)
}

func (s *idemStream) acked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acks)
}

func (s *idemStream) ackedAfter(t time.Time, pred func(ack) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.acks {
		if a.At.After(t) && pred(a) {
			n++
		}
	}
	return n
}

// Scenario 3: drain a node under load from idempotent producers and
// readers going through every node. Zero acknowledged records lost,
// producer sequences continue on the new owners (retries after a 503 or a
// broken connection are deduplicated), readers resume from their position.
// Then SIGTERM drains the node that now owns the most streams.
func TestClusterDrain(t *testing.T) {
	c := startCluster(t, 3, clusterOpts{})
	a := c.nodes[0]
	const nStreams = 12
	streams := make([]*idemStream, nStreams)
	for i := range streams {
		s := &idemStream{name: fmt.Sprintf("/drain/s%02d", i), producerID: fmt.Sprintf("e2e-drain-%d", i), durability: "local"}
		if i%3 == 0 {
			s.durability = "object"
		}
		streams[i] = s
		wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+s.name, nil, "Content-Type", "text/plain", hdrDurability, s.durability).response, 201, "create "+s.name)
	}

	// targets is the set of nodes clients may send to; a node leaves it
	// just before it is stopped.
	var targets atomic.Pointer[[]*clusterNode]
	all := append([]*clusterNode(nil), c.nodes...)
	targets.Store(&all)
	pick := func(rng *rand.Rand) *clusterNode {
		ts := *targets.Load()
		return ts[rng.IntN(len(ts))]
	}

	var (
		stopProd, stopRead atomic.Bool
		prodWG, readWG     sync.WaitGroup
		errs               errorList
		retries            atomic.Int64
	)
	for i, s := range streams {
		prodWG.Add(1)
		go func() {
			defer prodWG.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for seq := 0; !stopProd.Load(); seq++ {
				v := fmt.Sprintf("%s#%d", s.name, seq)
				hdr := []string{"Content-Type", "text/plain", hdrProducerID, s.producerID, hdrProducerEpoch, "0", hdrProducerSeq, strconv.Itoa(seq)}
				deadline := time.Now().Add(60 * time.Second)
				for attempt := 0; ; attempt++ {
					via := pick(rng)
					r, err := send(context.Background(), follow, "POST", via.URL+s.name, []byte(v), hdr...)
					if err == nil && r.Status == 200 {
						off, perr := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
						if perr != nil || r.servedBy() == "" {
							errs.add("%s seq %d: ack without Pico-Offset/Pico-Served-By: %v", s.name, seq, r.Header)
							return
						}
						s.mu.Lock()
						s.acks = append(s.acks, ack{Offset: off, Value: v, At: time.Now(), ServedBy: r.servedBy()})
						if r.Header.Get(hdrDuplicate) == "true" {
							s.dups++
						}
						s.mu.Unlock()
						break
					}
					if err == nil && r.Status == 503 {
						if e := unavailableError(r); e != nil {
							errs.add("%s seq %d via %s: %v", s.name, seq, via.ID, e)
						}
					} else if err == nil {
						// 409 producer_seq_gap here means the sequence did
						// not survive the handover.
						s.mu.Lock()
						prev := "none"
						if n := len(s.acks); n > 0 {
							x := s.acks[n-1]
							prev = fmt.Sprintf("seq %d at offset %d by %s at %s", n-1, x.Offset, x.ServedBy, x.At.Format("15:04:05.000"))
						}
						s.mu.Unlock()
						errs.add("%s seq %d via %s at %s: status %d %s (previous ack: %s)", s.name, seq, via.ID,
							time.Now().Format("15:04:05.000"), r.Status, bytes.TrimSpace(r.Body), prev)
						return
					}
					retries.Add(1)
					if time.Now().After(deadline) {
						errs.add("%s seq %d: not acknowledged within 60s (last error %v)", s.name, seq, err)
						return
					}
					time.Sleep(retryBackoff) // then retry the same seq: dedup makes it safe
				}
				time.Sleep(20 * time.Millisecond) // pacing
			}
		}()
		readWG.Add(1)
		go func() {
			defer readWG.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 2))
			for !stopRead.Load() {
				s.mu.Lock()
				pos := s.readerAt
				s.mu.Unlock()
				via := pick(rng)
				r, err := send(context.Background(), follow, "GET", fmt.Sprintf("%s%s?offset=%d", via.URL, s.name, pos), nil)
				if err != nil || r.Status == 503 {
					if err == nil {
						if e := unavailableError(r); e != nil {
							errs.add("reader %s via %s: %v", s.name, via.ID, e)
						}
					}
					time.Sleep(retryBackoff)
					continue
				}
				if r.Status != 200 {
					errs.add("reader %s at %d via %s: status %d %s", s.name, pos, via.ID, r.Status, bytes.TrimSpace(r.Body))
					return
				}
				var page []jsonRecord
				if err := json.Unmarshal(r.Body, &page); err != nil {
					errs.add("reader %s: %v", s.name, err)
					return
				}
				s.mu.Lock()
				for _, rec := range page {
					if rec.Offset != s.readerAt || rec.Value == nil {
						s.mu.Unlock()
						errs.add("reader %s at %d got offset %d via %s (gap, repeat or null)", s.name, s.readerAt, rec.Offset, via.ID)
						return
					}
					s.read = append(s.read, record{rec.Offset, *rec.Value})
					s.readerAt++
				}
				s.mu.Unlock()
				if len(page) == 0 {
					time.Sleep(20 * time.Millisecond) // caught up: poll again shortly
				}
			}
		}()
	}
	stopAll := func() {
		stopProd.Store(true)
		prodWG.Wait()
		stopRead.Store(true)
		readWG.Wait()
	}
	defer stopAll()
	await := func(what string, within time.Duration, cond func(*idemStream) bool) {
		t.Helper()
		ok := pollUntil(within, 20*time.Millisecond, func() bool {
			for _, s := range streams {
				if !cond(s) {
					return false
				}
			}
			return true
		})
		if !ok {
			stopAll()
			errs.check(t, "clients")
			t.Fatalf("%s: not reached within %v", what, within)
		}
		errs.check(t, "clients")
	}

	await("10 acks per stream before the drain", 30*time.Second, func(s *idemStream) bool { return s.acked() >= 10 })
	readBefore := map[string]int64{}
	for _, s := range streams {
		s.mu.Lock()
		readBefore[s.name] = s.readerAt
		s.mu.Unlock()
	}

	// Drain A through the endpoint.
	drainStart := time.Now()
	t.Logf("POST /_sys/drain to %s at %s", a.ID, drainStart.Format("15:04:05.000"))
	drainClient := &http.Client{Transport: transport, Timeout: 120 * time.Second}
	r, err := send(context.Background(), drainClient, "POST", a.URL+"/_sys/drain", nil)
	if err != nil {
		t.Fatalf("POST /_sys/drain: %v", err)
	}
	drainDone := time.Now()
	wantStatus(t, r.response, 200, "drain")
	var moved struct {
		Moved *int `json:"moved"`
	}
	if err := json.Unmarshal(r.Body, &moved); err != nil || moved.Moved == nil || *moved.Moved != nStreams {
		t.Fatalf("drain reply %s: want {\"moved\":%d}", r.Body, nStreams)
	}
	t.Logf("drained %s: %d streams moved in %v", a.ID, *moved.Moved, drainDone.Sub(drainStart).Round(time.Millisecond))

	owners := checkOwners(t, c, streams, a)
	notA := func(x ack) bool { return x.ServedBy != a.ID }
	await("10 acks per stream on the new owners after the drain", 30*time.Second, func(s *idemStream) bool {
		return s.ackedAfter(drainDone, notA) >= 10
	})
	for _, s := range streams {
		if n := s.ackedAfter(drainDone, func(x ack) bool { return !notA(x) }); n > 0 {
			t.Fatalf("%s: %d appends acknowledged by the drained node %s after the drain returned", s.name, n, a.ID)
		}
	}
	// The drained node owns nothing: it redirects to the new owners.
	for _, s := range streams {
		r := mustSend(t, noRedirect, "HEAD", a.URL+s.name, nil)
		checkRedirect(t, r, owners[s.name], s.name, "HEAD "+s.name+" on the drained node")
	}

	// SIGTERM drains too: stop the node owning the most streams now.
	count := map[string]int{}
	for _, o := range owners {
		count[o.ID]++
	}
	victim := c.nodes[1]
	if count[c.nodes[2].ID] > count[victim.ID] {
		victim = c.nodes[2]
	}
	var rest []*clusterNode
	for _, n := range c.nodes {
		if n != victim {
			rest = append(rest, n)
		}
	}
	targets.Store(&rest)
	termAt := time.Now()
	victim.stop(t) // SIGTERM; fails the test unless it exits 0 within 30s
	t.Logf("SIGTERM to %s (owner of %d streams) at %s; it drained and exited in %v",
		victim.ID, count[victim.ID], termAt.Format("15:04:05.000"), time.Since(termAt).Round(time.Millisecond))
	notVictim := func(x ack) bool { return x.ServedBy != victim.ID }
	await("5 acks per stream after the SIGTERM", 30*time.Second, func(s *idemStream) bool {
		return s.ackedAfter(termAt, notVictim) >= 5
	})

	stopProd.Store(true)
	prodWG.Wait()
	errs.check(t, "producers")
	final := map[string]int{}
	for _, s := range streams {
		final[s.name] = s.acked()
	}
	await("readers caught up", 30*time.Second, func(s *idemStream) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.readerAt >= int64(final[s.name])
	})
	stopRead.Store(true)
	readWG.Wait()

	// A retry of each producer's last request is deduplicated by the
	// current owner with the original offset: producer state moved twice.
	var dups int
	for _, s := range streams {
		last := s.acks[len(s.acks)-1]
		seq := len(s.acks) - 1
		r := mustSend(t, follow, "POST", rest[0].URL+s.name, []byte(last.Value), "Content-Type", "text/plain",
			hdrProducerID, s.producerID, hdrProducerEpoch, "0", hdrProducerSeq, strconv.Itoa(seq))
		wantStatus(t, r.response, 200, "retry of the last seq of "+s.name)
		if r.Header.Get(hdrDuplicate) != "true" || r.Header.Get("Pico-Offset") != strconv.FormatInt(last.Offset, 10) {
			t.Fatalf("%s: retry of seq %d: Pico-Duplicate %q, Pico-Offset %q; want true, %d",
				s.name, seq, r.Header.Get(hdrDuplicate), r.Header.Get("Pico-Offset"), last.Offset)
		}
		dups += s.dups
	}

	// Exactly what was acknowledged, once each, in sequence order; the
	// readers saw the same, without a gap across both handovers.
	for _, s := range streams {
		want := make([]string, len(s.acks))
		for seq, x := range s.acks {
			want[seq] = x.Value
			if x.Offset != int64(seq) {
				t.Fatalf("%s: seq %d acknowledged at offset %d; a producer's only writes must be at offset = seq", s.name, seq, x.Offset)
			}
		}
		for _, via := range rest {
			if err := sameValues(mustReadStream(t, via.URL, s.name), want); err != nil {
				t.Fatalf("%s via %s after two handovers: %v", s.name, via.ID, err)
			}
		}
		if err := sameValues(s.read, want); err != nil {
			t.Fatalf("%s: what the reader saw: %v", s.name, err)
		}
		if int64(len(s.read)) <= readBefore[s.name] {
			t.Fatalf("%s: reader made no progress after the drain", s.name)
		}
	}
	t.Logf("drain: %d streams, %d retried attempts, %d retries answered as duplicates, 0 acknowledged records lost", nStreams, retries.Load(), dups)
}

// checkOwners returns each stream's owner after drained left; none may be
// drained itself.
func checkOwners(t *testing.T, c *cluster, streams []*idemStream, drained *clusterNode) map[string]*clusterNode {
	t.Helper()
	owners := map[string]*clusterNode{}
	spread := map[string]int{}
	for _, s := range streams {
		var r reply
		ok := pollUntil(10*time.Second, 50*time.Millisecond, func() bool {
			r = mustSend(t, follow, "HEAD", c.nodes[1].URL+s.name, nil)
			return r.Status != 503
		})
		if !ok {
			t.Fatalf("HEAD %s: still 503 10s after the drain", s.name)
		}
		wantStatus(t, r.response, 200, "HEAD "+s.name+" after the drain")
		id := r.Header.Get(hdrOwner)
		if id == drained.ID || id == "" {
			t.Fatalf("%s: Pico-Owner %q after draining %s", s.name, id, drained.ID)
		}
		owners[s.name] = c.node(id)
		spread[id]++
	}
	t.Logf("owners after draining %s: %v", drained.ID, spread)
	return owners
}

// Scenario 4: etcd stopped for longer than the lease TTL. Requests that
// need routing get 503 + Retry-After (never a guess), nothing acknowledged
// is lost or corrupted, and service resumes when etcd is back.
func TestClusterEtcdOutage(t *testing.T) {
	c := startCluster(t, 3, clusterOpts{})
	opts := c.opts // with the defaults filled in
	a, b, cn := c.nodes[0], c.nodes[1], c.nodes[2]
	names := []string{"/outage/s0", "/outage/s1", "/outage/s2", "/outage/s3"}
	var (
		mu    sync.Mutex
		acked = map[string]map[int64]string{}
		sent  atomic.Int64
		errs  errorList
	)
	value := func(name string) string { return fmt.Sprintf("%s#%d", name, sent.Add(1)) }
	recordAck := func(name string, r reply, v string) error {
		off, err := strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: ack without Pico-Offset", name)
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := acked[name][off]; dup {
			return fmt.Errorf("%s: offset %d acknowledged twice (%q, then %q)", name, off, prev, v)
		}
		acked[name][off] = v
		return nil
	}
	for _, name := range names {
		acked[name] = map[int64]string{}
		wantStatus(t, mustSend(t, noRedirect, "PUT", a.URL+name, nil, "Content-Type", "text/plain").response, 201, "create "+name)
		for i := 0; i < 20; i++ {
			v := value(name)
			r := mustSend(t, follow, "POST", []*clusterNode{b, cn}[i%2].URL+name, []byte(v), "Content-Type", "text/plain")
			wantStatus(t, r.response, 200, "append before the outage")
			if err := recordAck(name, r, v); err != nil {
				t.Fatal(err)
			}
		}
	}

	// etcd goes away right after the appends, so the owner holds acked
	// records that are not in object storage yet. Three probes run
	// concurrently for the whole outage, each request bounded by the
	// client timeout (a hang fails the test).
	c.etcd.stop()
	outage := opts.LeaseTTL + 2*time.Second
	t.Logf("etcd stopped for %v (lease TTL %v)", outage, opts.LeaseTTL)
	var (
		stop                                    atomic.Bool
		wg                                      sync.WaitGroup
		routed503, ownerAcks, owner503, history atomic.Int64
	)
	probe := func(fn func(i int, name string)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				fn(i, names[i%len(names)])
				time.Sleep(50 * time.Millisecond) // probe pacing
			}
		}()
	}
	// A routed request: B must ask etcd who owns the stream.
	probe(func(i int, name string) {
		r, err := send(context.Background(), noRedirect, "POST", b.URL+name, []byte(value(name)), "Content-Type", "text/plain")
		switch {
		case err != nil:
			errs.add("routed POST %s via %s during the outage: %v", name, b.ID, err)
		case r.Status == 503:
			if err := unavailableError(r); err != nil {
				errs.add("routed POST during the outage: %v", err)
			}
			routed503.Add(1)
		case r.Status == 307:
			if err := redirectError(r, a.URL+name); err != nil { // a 307 may only name the real owner
				errs.add("routed POST during the outage: %v", err)
			}
		default:
			errs.add("routed POST %s via %s during the etcd outage: status %d %s (want 503, or 307 to the owner)", name, b.ID, r.Status, bytes.TrimSpace(r.Body))
		}
	})
	// The owner itself may ack locally while it trusts its lease, or 503.
	probe(func(i int, name string) {
		v := value(name)
		r, err := send(context.Background(), noRedirect, "POST", a.URL+name, []byte(v), "Content-Type", "text/plain")
		switch {
		case err != nil:
			errs.add("POST %s on the owner during the outage: %v", name, err)
		case r.Status == 200:
			if err := recordAck(name, r, v); err != nil {
				errs.add("%v", err)
			}
			ownerAcks.Add(1)
		case r.Status == 503:
			if err := unavailableError(r); err != nil {
				errs.add("owner POST during the outage: %v", err)
			}
			owner503.Add(1)
		default:
			errs.add("POST %s on the owner during the etcd outage: status %d %s (want 200 or 503)", name, r.Status, bytes.TrimSpace(r.Body))
		}
	})
	// History from a non-owner: its own answer, a 307 to the owner, or 503.
	probe(func(i int, name string) {
		r, err := send(context.Background(), noRedirect, "GET", cn.URL+name+"?offset=0", nil)
		switch {
		case err != nil:
			errs.add("history read %s on %s during the outage: %v", name, cn.ID, err)
		case r.Status == 200:
			var page []jsonRecord
			if err := json.Unmarshal(r.Body, &page); err != nil {
				errs.add("history during the outage: %v", err)
				return
			}
			mu.Lock()
			for _, rec := range page {
				if want, ok := acked[name][rec.Offset]; !ok || rec.Value == nil || *rec.Value != want {
					errs.add("history during the outage: %s offset %d = %v, acknowledged %q", name, rec.Offset, rec.Value, want)
				}
			}
			mu.Unlock()
			history.Add(1)
		case r.Status == 307:
			if err := redirectError(r, a.URL+name+"?offset=0"); err != nil {
				errs.add("history read during the outage: %v", err)
			}
		case r.Status == 503:
			if err := unavailableError(r); err != nil {
				errs.add("history read during the outage: %v", err)
			}
		default:
			errs.add("history read %s on %s during the outage: status %d %s", name, cn.ID, r.Status, bytes.TrimSpace(r.Body))
		}
	})
	time.Sleep(outage) // the outage itself: how long etcd stays away
	stop.Store(true)
	wg.Wait()
	t.Logf("during the outage: %d routed requests answered 503; the owner acked %d and refused %d appends; %d history reads served by %s",
		routed503.Load(), ownerAcks.Load(), owner503.Load(), history.Load(), cn.ID)
	errs.check(t, "requests during the etcd outage")
	if routed503.Load() == 0 {
		t.Fatalf("no routed request got a 503 while etcd was down for %v", outage)
	}

	c.etcd.start()
	back := time.Now()
	for _, name := range names {
		var last reply
		ok := pollUntil(30*time.Second, 50*time.Millisecond, func() bool {
			v := value(name)
			r, err := send(context.Background(), follow, "POST", b.URL+name, []byte(v), "Content-Type", "text/plain")
			if err != nil {
				return false
			}
			last = r
			switch r.Status {
			case 200:
				if err := recordAck(name, r, v); err != nil {
					t.Fatalf("after the outage: %v (acknowledged data lost or overwritten)", err)
				}
				return true
			case 503:
				if err := unavailableError(r); err != nil {
					t.Fatalf("after the outage: %v", err)
				}
				return false
			}
			t.Fatalf("append after the outage: status %d %s", r.Status, bytes.TrimSpace(r.Body))
			return false
		})
		if !ok {
			t.Fatalf("%s not writable 30s after etcd returned (last status %d %s)", name, last.Status, bytes.TrimSpace(last.Body))
		}
	}
	t.Logf("service resumed %v after etcd returned", time.Since(back).Round(time.Millisecond))
	for _, n := range c.nodes {
		if !pollUntil(30*time.Second, 50*time.Millisecond, func() bool {
			r, err := send(context.Background(), noRedirect, "GET", n.URL+"/readyz", nil)
			return err == nil && r.Status == 200
		}) {
			t.Fatalf("%s not ready 30s after etcd returned", n.ID)
		}
	}
	c.waitMembers(c.nodes, 30*time.Second)
	// The lease metrics the OwnerLeaseLost alert reads: every node counted
	// a loss (etcd was away longer than the lease TTL) and is no longer
	// fenced now that it is ready again.
	for _, n := range c.nodes {
		var lost, losses float64
		if !pollUntil(30*time.Second, 50*time.Millisecond, func() bool {
			r, err := send(context.Background(), noRedirect, "GET", n.URL+"/metrics", nil)
			if err != nil || r.Status != 200 {
				return false
			}
			m := parseExposition(string(r.Body))
			lost, losses = m["picomq_membership_lease_lost"], m["picomq_membership_lease_losses_total"]
			return lost == 0 && losses >= 1
		}) {
			t.Fatalf("%s after the outage: picomq_membership_lease_lost %v, picomq_membership_lease_losses_total %v (want 0 and >= 1)", n.ID, lost, losses)
		}
	}

	// Nothing lost or corrupt: every node reads the same contiguous log,
	// holding every acknowledged record at its offset and nothing unsent.
	for _, name := range names {
		var ref []record
		for _, via := range c.nodes {
			recs := mustReadStream(t, via.URL, name)
			if ref == nil {
				ref = recs
			} else if !equalRecords(recs, ref) {
				t.Fatalf("%s: %s reads %s, %s read %s", name, via.ID, summarize(recs), c.nodes[0].ID, summarize(ref))
			}
		}
		seen := map[string]bool{}
		for _, rec := range ref {
			if !strings.HasPrefix(rec.Value, name+"#") || seen[rec.Value] {
				t.Fatalf("%s offset %d: %q is not a value sent once to this stream", name, rec.Offset, rec.Value)
			}
			seen[rec.Value] = true
		}
		offs := make([]int64, 0, len(acked[name]))
		for off := range acked[name] {
			offs = append(offs, off)
		}
		sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
		for _, off := range offs {
			if off >= int64(len(ref)) || ref[off].Value != acked[name][off] {
				t.Fatalf("%s: acknowledged %q at offset %d is lost (log has %d records)", name, acked[name][off], off, len(ref))
			}
		}
	}
}
