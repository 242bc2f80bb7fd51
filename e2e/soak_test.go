package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/e2e/history"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// TestSoakKillRestart is the soak every `make test` runs: the history
// checker over `object` streams on a 3-node cluster while nodes are killed
// with -9 and restarted and etcd is stopped and restarted, for a minute.
// Any violation fails it. The full soak with an owner paused past its
// lease and both durability levels is TestSoak (`make soak`,
// soak_full_test.go).
func TestSoakKillRestart(t *testing.T) {
	res := runSoak(t, soakOpts{
		duration:     60 * time.Second,
		faultEvery:   8 * time.Second,
		durabilities: []string{"object"},
		faults:       []string{"kill-9", "etcd-stop"},
	})
	failOnViolations(t, res)
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
	duration     time.Duration
	faultEvery   time.Duration // mean time between faults
	durabilities []string
	faults       []string // kinds to choose from
}

// runSoak runs the clients and faults and returns the checked history.
func runSoak(t *testing.T, o soakOpts) history.Result {
	duration, faultEvery, durabilities := o.duration, o.faultEvery, o.durabilities
	const ttl, sealMaxAge = 3 * time.Second, 200 * time.Millisecond
	c := startCluster(t, 3, clusterOpts{LeaseTTL: ttl, SealMaxAge: sealMaxAge, Bin: o.bin})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 19))
	log := &history.Log{}

	type soakStream struct{ name, durability string }
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
				if rd.Outcome == history.OK && len(rd.Records) > 0 {
					next = rd.Records[len(rd.Records)-1].Offset + 1
				} else {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}

	// Faults, from this goroutine (the harness may call t.Fatal).
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) {
		wait := time.Duration(rng.Int64N(int64(2 * faultEvery)))
		if time.Until(deadline) < wait {
			time.Sleep(time.Until(deadline))
			break
		}
		time.Sleep(wait)
		n := c.nodes[rng.IntN(len(c.nodes))]
		f := history.Fault{Target: n.ID, Start: time.Now()}
		switch f.Kind = o.faults[rng.IntN(len(o.faults))]; f.Kind {
		case "kill-9":
			f.OwnerLoss = true
			n.Kill()
			time.Sleep(time.Duration(rng.Int64N(int64(2 * ttl))))
			n.restart()
		case "kill-9-past-lease":
			f.OwnerLoss = true
			n.Kill()
			time.Sleep(ttl + 2*time.Second)
			n.restart()
		case "sigstop-past-lease":
			f.OwnerLoss = true
			_ = n.Cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(ttl + time.Second + time.Duration(rng.Int64N(int64(ttl))))
			_ = n.Cmd.Process.Signal(syscall.SIGCONT)
		case "etcd-stop":
			f.Target = "etcd"
			c.etcd.stop()
			time.Sleep(time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
			c.etcd.start()
		default:
			t.Fatalf("unknown fault kind %q", f.Kind)
		}
		f.End = time.Now()
		log.AddFault(f)
		c.waitMembers(c.nodes, 60*time.Second)
	}
	stop()
	wg.Wait()

	// Final reads: every stream from every node, once the cluster is whole
	// and every owner has flushed what it holds.
	c.waitMembers(c.nodes, 60*time.Second)
	for _, s := range streams {
		for _, base := range urls {
			var recs []history.Record
			var err error
			ok := pollUntil(60*time.Second, 200*time.Millisecond, func() bool {
				recs, err = readAllRecords(client, base, s.name)
				return err == nil
			})
			if !ok {
				t.Errorf("final read of %s via %s kept failing for 60s: %v", s.name, base, err)
				continue
			}
			log.AddRead(history.Read{Client: -1, Stream: s.name, Outcome: history.OK, Final: true, Records: recs,
				Node: base, Start: time.Now(), End: time.Now()})
		}
	}

	res := log.Check(sealMaxAge + 2*time.Second)
	kinds := []string{}
	for k, n := range res.Faults {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	report := fmt.Sprintf("soak: duration %v, durability %v, faults by kind %v, local records lost after owner loss %d, largest local loss window %v (--seal-max-age %v), offset gaps readers were moved past %d (%d offsets), checks passed as local records seen then lost with their owner %d\n%s",
		duration, durabilities, kinds, res.LocalLost, res.LossWindow.Round(time.Millisecond), sealMaxAge, res.Gaps, res.GapOffsets, res.LocalLostSeen, res.Summary())
	fmt.Fprintln(os.Stdout, report)
	return res
}

// readPage is one GET from offset; it records what it got without judging.
func readPage(ctx context.Context, c *http.Client, base, name string, from int64) history.Read {
	rd := history.Read{Stream: name, From: from, Start: time.Now(), Node: base}
	r, err := send(ctx, c, "GET", fmt.Sprintf("%s%s?offset=%d&limit=1000", base, name, from), nil)
	rd.End = time.Now()
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

// readAllRecords pages through a stream from offset 0 until it is up to date.
func readAllRecords(c *http.Client, base, name string) ([]history.Record, error) {
	var recs []history.Record
	for off, pages := int64(0), 0; pages < 100000; pages++ {
		r, err := send(context.Background(), c, "GET", fmt.Sprintf("%s%s?offset=%d&limit=10000", base, name, off), nil)
		if err != nil {
			return nil, err
		}
		if r.Status != 200 {
			return nil, fmt.Errorf("offset %d: status %d (served by %s) %s", off, r.Status, r.servedBy(), lastBytes(string(r.Body), 300))
		}
		var page []jsonRecord
		if err := json.Unmarshal(r.Body, &page); err != nil {
			return nil, err
		}
		recs = historyRecords(recs, page)
		if r.Header.Get("Pico-Up-To-Date") == "true" {
			return recs, nil
		}
		next, err := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
		if err != nil || next <= off {
			return nil, fmt.Errorf("no progress at offset %d: Pico-Next-Offset %q, %d records on the page (served by %s)",
				off, r.Header.Get("Pico-Next-Offset"), len(page), r.servedBy())
		}
		off = next
	}
	return nil, fmt.Errorf("no end")
}
