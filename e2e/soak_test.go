package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/e2e/history"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// soakFaults are every fault kind the soak injects (docs/durability.md):
// a node killed with -9 and restarted, a node paused past its lease (a
// zombie owner), etcd stopped, object storage down, slow or answering 500s
// (through the fault proxy, faultproxy_test.go), a node's disk full.
var soakFaults = []string{"kill-9", "sigstop-past-lease", "etcd-stop", "minio-down", "minio-slow", "minio-500", "disk-full",
	"machine-lost", "replica-partition"}

// TestSoakShort is the soak every `make test` (so CI) runs: the history
// checker over `local` and `object` streams on a 3-node cluster for two
// minutes, and on until every fault kind of soakFaults was injected once.
// Any violation fails it. `make soak` runs the same for DURATION
// (TestSoak, soak_full_test.go).
func TestSoakShort(t *testing.T) {
	res := runSoak(t, soakOpts{
		duration:     2 * time.Minute,
		faultEvery:   6 * time.Second,
		durabilities: []string{"local", "replicated", "object"},
		faults:       soakFaults,
		deletion:     true,
		// A loaded 2-core CI machine makes every flush slow, and the
		// documented window grows with the flush time.
		lossWindow: 5 * time.Second,
	})
	failOnViolations(t, res)
	for _, k := range soakFaults {
		if res.Faults[k] == 0 {
			t.Errorf("fault %s was never injected (%v): the soak did not test it", k, res.Faults)
		}
	}
}

// failOnViolations reports each violation (the first 30) as a test error.
func failOnViolations(t *testing.T, res history.Result) {
	t.Helper()
	for i, v := range res.Violations {
		if i == 30 {
			t.Errorf("… and %d more", len(res.Violations)-30)
			break
		}
		t.Errorf("violation: %s", v)
	}
}

// TestSoakCatchesBrokenBuild runs the same checker against picomq built
// with the test-only tag picomq_broken_ack, which acknowledges `object`
// appends before their flush is committed, with kill -9 faults that keep
// the owner down past its lease (so another node takes its streams over).
// The checker must report violations: a checker that passes a broken build
// proves nothing.
func TestSoakCatchesBrokenBuild(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "picomq-broken-ack")
	if err := testproc.Build(bin, testproc.Picomq, "picomq_broken_ack"); err != nil {
		t.Fatal(err)
	}
	res := runSoak(t, soakOpts{
		bin:          bin,
		duration:     40 * time.Second,
		faultEvery:   5 * time.Second,
		durabilities: []string{"object"},
		faults:       []string{"kill-9-past-lease"},
	})
	if len(res.Violations) == 0 {
		t.Fatalf("the checker found no violation in a build that acknowledges before committing (%s)", res.Summary())
	}
	t.Logf("caught: %d violations, e.g. %s", len(res.Violations), res.Violations[0])
}

type soakOpts struct {
	bin          string
	nodeFlags    []string      // added to every node's serve flags (e.g. --replica-ack write)
	duration     time.Duration // at least; on until every kind of faults was injected
	faultEvery   time.Duration // mean time between faults
	durabilities []string
	faults       []string // kinds to draw from, each once per round in random order
	// lossWindow is the documented `local` loss window the checker allows
	// (--seal-max-age plus a flush); default --seal-max-age + 2s.
	lossWindow time.Duration
	// deletion adds the deletion workload (soak_deletion_test.go): creates,
	// forks, trims, retention and deletes, with GC, retention and
	// compaction running every few seconds on the nodes.
	deletion bool
}

// soakStream is a stream the soak writes and reads back at the end.
type soakStream struct{ name, durability string }

// diskFullFlag is node.DiskFullFlag (node/diskfull_faults.go, compiled
// only with the test tag picomq_faultfs): while this file exists in a
// node's data dir, its WAL writes fail with ENOSPC.
const diskFullFlag = "fault-disk-full"

// runSoak runs the clients and faults and returns the checked history.
func runSoak(t *testing.T, o soakOpts) history.Result {
	duration, faultEvery, durabilities := o.duration, o.faultEvery, o.durabilities
	const ttl, sealMaxAge = 3 * time.Second, 200 * time.Millisecond
	if o.lossWindow == 0 {
		o.lossWindow = sealMaxAge + 2*time.Second
	}
	copts := clusterOpts{LeaseTTL: ttl, SealMaxAge: sealMaxAge, Bin: o.bin, Extra: o.nodeFlags}
	if o.deletion {
		copts.Extra = append(copts.Extra, deletionFlags...)
	}
	blockers := map[string]*replicaBlocker{}
	for _, k := range o.faults {
		switch {
		case k == "replica-partition":
			// Every node behind a proxy through which the others reach
			// it, so one node's replication endpoint can be cut off.
			copts.AdvertiseVia = func(id, addr string) string {
				var u string
				blockers[id], u = startReplicaBlocker(t, addr)
				return u
			}
		case strings.HasPrefix(k, "minio-"):
			copts.ObjectProxy = true
		case k == "disk-full" && copts.Bin == "":
			copts.Bin = filepath.Join(t.TempDir(), "picomq-faultfs")
			if err := testproc.Build(copts.Bin, testproc.Picomq, "picomq_faultfs"); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := startCluster(t, 3, copts)
	c.replicaBlockers = blockers
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 19))
	log := &history.Log{}

	var streams []soakStream
	for _, d := range durabilities {
		for i := range 3 {
			s := soakStream{fmt.Sprintf("/soak/%s/%d", d, i), d}
			owner := c.nodes[i%len(c.nodes)]
			r := mustSend(t, noRedirect, "PUT", owner.URL+s.name, nil, "Content-Type", "text/plain", hdrDurability, d)
			wantStatus(t, r.response, 201, "create "+s.name)
			streams = append(streams, s)
		}
	}
	urls := func() []string {
		var u []string
		for _, n := range c.nodes {
			u = append(u, n.URL)
		}
		return u
	}()
	client := &http.Client{Timeout: 5 * time.Second, CheckRedirect: follow.CheckRedirect}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for ci, s := range streams {
		wg.Add(2)
		go func() { // an idempotent producer: retries unknown outcomes with the same sequence
			defer wg.Done()
			prng := rand.New(rand.NewPCG(uint64(ci), 1))
			epoch := 0
			for seq := 0; ctx.Err() == nil; seq++ {
				value := fmt.Sprintf("c%d-s%d-%x", ci, seq, prng.Uint32())
				for attempt := 0; attempt < 20 && ctx.Err() == nil; attempt++ {
					base := urls[prng.IntN(len(urls))]
					a := history.Append{Client: ci, Stream: s.name, Durability: s.durability, Value: value, Retry: attempt > 0, Start: time.Now()}
					r, err := send(ctx, client, "POST", base+s.name, []byte(value), "Content-Type", "text/plain",
						hdrProducerID, fmt.Sprintf("soak-%d", ci), hdrProducerEpoch, strconv.Itoa(epoch), hdrProducerSeq, strconv.Itoa(seq))
					a.End = time.Now()
					switch {
					case err != nil || r.Status >= 500:
						a.Outcome = history.Unknown
					case r.Status == 200:
						a.Outcome, a.Node = history.OK, r.servedBy()
						a.Offset, _ = strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
						if r.Header.Get(hdrDuplicate) == "true" && a.Offset < 0 {
							a.Outcome = history.Unknown // acknowledged long ago; offset not repeated
						}
					default:
						a.Outcome = history.Failed
					}
					log.AddAppend(a) // also when cancelled: the request may have landed
					if r.Status == 409 {
						// Sequence gap: the owner lost appends this producer
						// had acknowledged (local durability, owner lost).
						// Start a new epoch, as a real producer would;
						// the next value starts it at sequence 0.
						epoch++
						seq = -1
					}
					if a.Outcome != history.Unknown {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
		go func() { // a reader following the stream from offset 0
			defer wg.Done()
			prng := rand.New(rand.NewPCG(uint64(ci), 2))
			next := int64(0)
			for ctx.Err() == nil {
				base := urls[prng.IntN(len(urls))]
				rd := readPage(ctx, client, base, s.name, next)
				if ctx.Err() != nil {
					return
				}
				rd.Client, rd.Tail = 1000+ci, true
				log.AddRead(rd)
				if rd.Outcome == history.OK && rd.Trimmed {
					next = rd.StartOffset // trimmed: continue where the stream starts
				} else if rd.Outcome == history.OK && len(rd.Records) > 0 {
					next = rd.Records[len(rd.Records)-1].Offset + 1
				} else {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}

	var deletion *deletionWorkload
	var gc gcCounter
	if o.deletion {
		deletion = &deletionWorkload{log: log, client: client, urls: urls, durabilities: durabilities, mainStreams: streams}
		wg.Add(2)
		go func() {
			defer wg.Done()
			deletion.run(ctx, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3)))
		}()
		go func() { // the nodes' GC counters, scraped often enough to see through restarts
			defer wg.Done()
			for ctx.Err() == nil {
				gc.scrape(ctx, urls)
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
			}
		}()
	}

	// Faults, from this goroutine (the harness may call t.Fatal): drawn
	// from a deck holding each kind once, so every kind comes up; the run
	// lasts at least duration and goes on (5 minutes at most) until every
	// kind was injected.
	kinds := map[string]bool{}
	for _, k := range o.faults {
		kinds[k] = true
	}
	var deck []string
	injected := map[string]bool{}
	deadline := time.Now().Add(duration)
	for {
		all := len(injected) == len(kinds)
		wait := time.Duration(rng.Int64N(int64(2 * faultEvery)))
		if all && time.Until(deadline) < wait {
			time.Sleep(time.Until(deadline))
			break
		}
		if !all && time.Now().After(deadline) {
			if time.Now().After(deadline.Add(5 * time.Minute)) {
				t.Errorf("only %d of %d fault kinds injected 5 minutes past the soak's duration", len(injected), len(kinds))
				break
			}
			wait = min(wait, time.Second)
		}
		time.Sleep(wait)
		if len(deck) == 0 {
			deck = append(deck, o.faults...)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		kind := deck[0]
		deck = deck[1:]
		n := c.nodes[rng.IntN(len(c.nodes))]
		f := history.Fault{Kind: kind, Target: n.ID, Start: time.Now()}
		injectFault(t, c, n, &f, rng, ttl)
		f.End = time.Now()
		log.AddFault(f)
		injected[kind] = true
		c.waitMembers(c.nodes, 60*time.Second)
	}
	stop()
	wg.Wait()

	// Final reads: every stream from every node, once the cluster is whole
	// and every owner has flushed what it holds.
	c.waitMembers(c.nodes, 60*time.Second)
	// Pages of 10 000 records from object storage can take seconds on a
	// loaded machine: a 5 s timeout made a 10-minute run fail here.
	finalClient := &http.Client{Timeout: time.Minute, CheckRedirect: follow.CheckRedirect}
	finalStreams := streams
	if deletion != nil {
		finalStreams = append(finalStreams, deletion.live()...)
	}
	for _, s := range finalStreams {
		for _, base := range urls {
			var recs []history.Record
			var from int64
			var err error
			ok := pollUntil(3*time.Minute, 200*time.Millisecond, func() bool {
				recs, from, err = readAllRecords(finalClient, base, s.name)
				return err == nil
			})
			if !ok {
				t.Errorf("final read of %s via %s kept failing for 3 minutes: %v", s.name, base, err)
				continue
			}
			log.AddRead(history.Read{Client: -1, Stream: s.name, From: from, Outcome: history.OK, Final: true, Records: recs,
				Node: base, Start: time.Now(), End: time.Now()})
		}
	}

	res := log.Check(o.lossWindow)
	if len(res.Violations) > 0 {
		dumpRegistry(os.Stdout, c.etcd.Endpoint(), res.Violations)
	}
	if deletion != nil {
		gc.scrape(context.Background(), urls)
		res.GCRuns, res.GCDeleted, res.GCKnown = int(gc.runs), int(gc.deleted), true
		fmt.Fprintf(os.Stdout, "soak deletion: %s; GC: %d passes, %d objects deleted\n", res.DeletionSummary(), res.GCRuns, res.GCDeleted)
	}
	var byKind []string
	for k, n := range res.Faults {
		byKind = append(byKind, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(byKind)
	report := fmt.Sprintf("soak: duration %v (at least), durability %v, faults by kind %v, ownership changes seen in acks %d, "+
		"local records lost after owner loss %d, largest local loss window %v (%v without an object-storage fault in it; "+
		"--seal-max-age %v, allowed %v plus object-storage stalls), offset gaps readers were moved past %d (%d offsets), "+
		"checks passed as local records seen then lost with their owner %d\n%s",
		duration, durabilities, byKind, res.OwnerChanges, res.LocalLost, res.LossWindow.Round(time.Millisecond),
		res.LossWindowNoStall.Round(time.Millisecond), sealMaxAge, o.lossWindow, res.Gaps, res.GapOffsets, res.LocalLostSeen, res.Summary())
	fmt.Fprintln(os.Stdout, report)
	return res
}

// injectFault injects one fault of kind f.Kind into node n (or etcd, or
// object storage) and returns when it is over: the node is back, etcd is
// up, the proxy passes requests again.
func injectFault(t *testing.T, c *cluster, n *clusterNode, f *history.Fault, rng *rand.Rand, ttl time.Duration) {
	t.Helper()
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch f.Kind {
	case "kill-9":
		f.OwnerLoss = true
		n.Kill()
		time.Sleep(between(0, 2*ttl)) // sometimes back within the lease, sometimes not
		n.restart()
	case "kill-9-past-lease":
		f.OwnerLoss = true
		n.Kill()
		time.Sleep(ttl + 2*time.Second)
		n.restart()
	case "sigstop-past-lease":
		f.OwnerLoss = true
		_ = n.Cmd.Process.Signal(syscall.SIGSTOP)
		time.Sleep(between(ttl+time.Second, 2*ttl+time.Second))
		_ = n.Cmd.Process.Signal(syscall.SIGCONT)
	case "etcd-stop":
		f.Target = "etcd"
		c.etcd.stop()
		time.Sleep(between(time.Second, 4*time.Second))
		c.etcd.start()
	case "minio-down", "minio-500", "minio-slow":
		f.Target, f.StallsFlush = "object storage", true
		switch f.Kind {
		case "minio-down":
			c.proxy.Set(proxyDown, 0)
		case "minio-500":
			c.proxy.Set(proxy500, 0)
		default:
			c.proxy.Set(proxySlow, between(500*time.Millisecond, 2*time.Second))
		}
		time.Sleep(between(2*time.Second, 6*time.Second))
		c.proxy.Set(proxyPass, 0)
	case "machine-lost":
		// The machine is replaced: kill -9, its disk gone, the node back
		// with the same id and an empty data dir, sometimes within its
		// lease, sometimes after its streams were taken over.
		f.OwnerLoss = true
		n.Kill()
		if err := os.RemoveAll(n.dataDir); err != nil {
			t.Fatal(err)
		}
		time.Sleep(between(0, 2*ttl))
		n.restart()
	case "replica-partition":
		// The owners cannot reach n's replication endpoint (their
		// requests hang); everything else still reaches it.
		b := c.replicaBlockers[n.ID]
		if b == nil {
			t.Fatalf("replica-partition: %s has no proxy in front of it", n.ID)
		}
		b.blocked.Store(true)
		time.Sleep(between(2*time.Second, 6*time.Second))
		b.blocked.Store(false)
	case "disk-full":
		// The node's WAL fails for good on ENOSPC (docs/durability.md):
		// after space is freed, it is restarted. The restart may come
		// after its lease, so its streams may have moved.
		f.OwnerLoss = true
		flag := filepath.Join(n.dataDir, diskFullFlag)
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		checkDiskFull(t, n)
		time.Sleep(between(time.Second, 4*time.Second))
		if err := os.Remove(flag); err != nil {
			t.Fatal(err)
		}
		n.Kill()
		n.restart()
	default:
		t.Fatalf("unknown fault kind %q", f.Kind)
	}
}

// checkDiskFull checks that the disk-full fault is real: an append to a
// stream n owns gets 503 and n's /readyz turns 503 (the WAL failed).
func checkDiskFull(t *testing.T, n *clusterNode) {
	t.Helper()
	probe := fmt.Sprintf("/soak-probe/%s-%d", n.ID, time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := send(ctx, noRedirect, "PUT", n.URL+probe, nil, "Content-Type", "text/plain")
	if err == nil && r.Status == 201 {
		r, err = send(ctx, noRedirect, "POST", n.URL+probe, []byte("probe"), "Content-Type", "text/plain")
	}
	if err != nil || r.Status != 503 {
		t.Errorf("disk-full on %s: a probe write got %v (error %v), want 503", n.ID, r.Status, err)
		return
	}
	if !pollUntil(20*time.Second, 100*time.Millisecond, func() bool {
		r, err := send(ctx, noRedirect, "GET", n.URL+"/readyz", nil)
		return err == nil && r.Status == 503
	}) {
		t.Errorf("disk-full on %s: /readyz did not turn 503 within 20s", n.ID)
	}
}

// readPage is one GET from offset; it records what it got without judging.
// A 410 offset_trimmed is recorded with the start offset it names.
func readPage(ctx context.Context, c *http.Client, base, name string, from int64) history.Read {
	rd := history.Read{Stream: name, From: from, Start: time.Now(), Node: base}
	r, err := send(ctx, c, "GET", fmt.Sprintf("%s%s?offset=%d&limit=1000", base, name, from), nil)
	rd.End = time.Now()
	if err == nil && r.Status == http.StatusGone {
		if start, perr := strconv.ParseInt(r.Header.Get("Pico-Start-Offset"), 10, 64); perr == nil {
			rd.Outcome, rd.Trimmed, rd.StartOffset, rd.Node = history.OK, true, start, r.servedBy()
			return rd
		}
	}
	if err != nil || r.Status != 200 {
		rd.Outcome = history.Unknown
		return rd
	}
	var page []jsonRecord
	if json.Unmarshal(r.Body, &page) != nil {
		rd.Outcome = history.Unknown
		return rd
	}
	rd.Node = r.servedBy()
	rd.Records = historyRecords(rd.Records, page)
	return rd
}

// historyRecords appends a read page's records to recs as the checker
// sees them (a null value as "").
func historyRecords(recs []history.Record, page []jsonRecord) []history.Record {
	for _, p := range page {
		v := ""
		if p.Value != nil {
			v = *p.Value
		}
		recs = append(recs, history.Record{Offset: p.Offset, Value: v})
	}
	return recs
}

// readAllRecords pages through a stream from its start offset until it is
// up to date, and returns the start offset it began at: it asks for offset
// 0 and follows a 410 offset_trimmed to the start offset it names (again
// if retention or a trim moves it while the read goes on).
func readAllRecords(c *http.Client, base, name string) ([]history.Record, int64, error) {
	var recs []history.Record
	start := int64(0)
	for off, pages := int64(0), 0; pages < 100000; pages++ {
		r, err := send(context.Background(), c, "GET", fmt.Sprintf("%s%s?offset=%d&limit=10000", base, name, off), nil)
		if err != nil {
			return nil, 0, err
		}
		if r.Status == http.StatusGone {
			s, err := strconv.ParseInt(r.Header.Get("Pico-Start-Offset"), 10, 64)
			if err != nil || s <= off {
				return nil, 0, fmt.Errorf("offset %d: 410 with Pico-Start-Offset %q (served by %s)", off, r.Header.Get("Pico-Start-Offset"), r.servedBy())
			}
			// Records read so far are below the new start: begin again there.
			recs, start, off = recs[:0], s, s
			continue
		}
		if r.Status != 200 {
			return nil, 0, fmt.Errorf("offset %d: status %d (served by %s) %s", off, r.Status, r.servedBy(), lastBytes(string(r.Body), 300))
		}
		var page []jsonRecord
		if err := json.Unmarshal(r.Body, &page); err != nil {
			return nil, 0, err
		}
		recs = historyRecords(recs, page)
		if r.Header.Get("Pico-Up-To-Date") == "true" {
			return recs, start, nil
		}
		next, err := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
		if err != nil || next <= off {
			return nil, 0, fmt.Errorf("no progress at offset %d: Pico-Next-Offset %q, %d records on the page (served by %s)",
				off, r.Header.Get("Pico-Next-Offset"), len(page), r.servedBy())
		}
		off = next
	}
	return nil, 0, fmt.Errorf("no end")
}
