package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/e2e/history"
	"github.com/PicoMQ/picomq/sdk/wire"
)

const (
	hdrForkSource = wire.HeaderForkSource
	hdrForkOffset = wire.HeaderForkOffset
)

// The soak's deletion workload: beside the producers and tailing readers
// of the long-lived streams, one client keeps creating streams, forking
// them (and the long-lived ones), appending to both, trimming, setting
// retention, deleting, and reading forks back whole, every second or so,
// while the nodes collect garbage, apply retention and compact every few
// seconds (deletionFlags). Every request goes into the history; the
// checker (e2e/history) knows what each may do to later reads.

// deletionFlags make the reclamation passes run every few seconds, so GC
// meets forks, trims and deletes many times in a run (the defaults would
// run GC about once in a short soak).
var deletionFlags = []string{"--gc-interval", "2s", "--retention-interval", "1s", "--compaction-interval", "2s"}

// churnStream is a stream the deletion workload created.
type churnStream struct {
	name, durability string
	fork             bool
	deleted          bool
}

// deletionWorkload runs until ctx ends; streams is shared with the final
// reads (deleted streams are skipped there). mainStreams may be forked
// and trimmed, never deleted.
type deletionWorkload struct {
	log          *history.Log
	client       *http.Client
	urls         []string
	durabilities []string
	mainStreams  []soakStream

	mu      sync.Mutex
	streams []*churnStream
	n       int
}

// live returns the streams a final read must cover: the workload's
// streams that no delete may have removed.
func (w *deletionWorkload) live() []soakStream {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []soakStream
	for _, s := range w.streams {
		if !s.deleted && !w.log.Deleted(s.name) {
			out = append(out, soakStream{s.name, s.durability})
		}
	}
	return out
}

func (w *deletionWorkload) run(ctx context.Context, rng *rand.Rand) {
	type op struct {
		weight int
		fn     func(context.Context, *rand.Rand)
	}
	ops := []op{
		{3, w.create},
		{4, w.appendSome},
		{3, w.fork},
		{3, w.trim},
		{1, w.retention},
		{2, w.delete},
		{3, w.readFork},
		{2, w.readFromZero},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for ctx.Err() == nil {
		pick := rng.IntN(total)
		for _, o := range ops {
			if pick < o.weight {
				o.fn(ctx, rng)
				break
			}
			pick -= o.weight
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(200+rng.IntN(600)) * time.Millisecond):
		}
	}
}

func (w *deletionWorkload) base(rng *rand.Rand) string { return w.urls[rng.IntN(len(w.urls))] }

// pick returns a random live workload stream (forks only if forks), or nil.
func (w *deletionWorkload) pick(rng *rand.Rand, forks bool) *churnStream {
	w.mu.Lock()
	defer w.mu.Unlock()
	var c []*churnStream
	for _, s := range w.streams {
		if !s.deleted && (!forks || s.fork) {
			c = append(c, s)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[rng.IntN(len(c))]
}

func (w *deletionWorkload) newName(kind string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	return fmt.Sprintf("/soak/churn/%s-%d", kind, w.n)
}

func (w *deletionWorkload) add(s *churnStream) {
	w.mu.Lock()
	w.streams = append(w.streams, s)
	w.mu.Unlock()
}

// create makes a plain stream with the next durability of the table and
// gives it a few records.
func (w *deletionWorkload) create(ctx context.Context, rng *rand.Rand) {
	d := w.durabilities[rng.IntN(len(w.durabilities))]
	s := &churnStream{name: w.newName("s"), durability: d}
	r, err := send(ctx, w.client, "PUT", w.base(rng)+s.name, nil, "Content-Type", "text/plain", hdrDurability, d)
	if err != nil || (r.Status != 201 && r.Status != 200) {
		return // maybe created, never used: nothing to check
	}
	w.add(s)
	w.appendTo(ctx, rng, s, 1+rng.IntN(8))
}

func (w *deletionWorkload) appendSome(ctx context.Context, rng *rand.Rand) {
	if s := w.pick(rng, false); s != nil {
		w.appendTo(ctx, rng, s, 1+rng.IntN(5))
	}
}

// appendTo appends n records, one request each, without retries: an
// unknown outcome stays unknown.
func (w *deletionWorkload) appendTo(ctx context.Context, rng *rand.Rand, s *churnStream, n int) {
	for range n {
		value := fmt.Sprintf("%s-%x", s.name, rng.Uint64())
		a := history.Append{Client: 2000, Stream: s.name, Durability: s.durability, Value: value, Start: time.Now()}
		r, err := send(ctx, w.client, "POST", w.base(rng)+s.name, []byte(value), "Content-Type", "text/plain")
		a.End = time.Now()
		switch {
		case err != nil || r.Status >= 500:
			a.Outcome = history.Unknown
		case r.Status == 200:
			a.Outcome, a.Node = history.OK, r.servedBy()
			a.Offset, _ = strconv.ParseInt(r.Header.Get("Pico-Offset"), 10, 64)
		default:
			a.Outcome = history.Failed
		}
		w.log.AddAppend(a)
		if ctx.Err() != nil {
			return
		}
	}
}

// fork forks a workload stream or a long-lived one at its tail or below
// it, then appends to the fork.
func (w *deletionWorkload) fork(ctx context.Context, rng *rand.Rand) {
	var src, d string
	if rng.IntN(3) == 0 {
		m := w.mainStreams[rng.IntN(len(w.mainStreams))]
		src, d = m.name, m.durability
	} else if s := w.pick(rng, false); s != nil {
		src, d = s.name, s.durability
	} else {
		return
	}
	headers := []string{hdrForkSource, src, hdrDurability, d}
	if rng.IntN(2) == 0 {
		// Below the tail: somewhere in the readable range.
		start, next, ok := w.head(ctx, rng, src)
		if !ok || next == 0 {
			return
		}
		headers = append(headers, hdrForkOffset, strconv.FormatInt(start+rng.Int64N(next-start+1), 10))
	}
	f := &churnStream{name: w.newName("f"), durability: d, fork: true}
	start := time.Now()
	r, err := send(ctx, w.client, "PUT", w.base(rng)+f.name, nil, headers...)
	if err != nil || r.Status != 201 {
		return
	}
	at, err := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
	if err != nil {
		return
	}
	w.log.AddFork(history.Fork{Stream: f.name, Source: src, At: at, Start: start, End: time.Now()})
	w.add(f)
	w.appendTo(ctx, rng, f, 1+rng.IntN(4))
}

// head returns a stream's start and next offsets.
func (w *deletionWorkload) head(ctx context.Context, rng *rand.Rand, name string) (start, next int64, ok bool) {
	r, err := send(ctx, w.client, "HEAD", w.base(rng)+name, nil)
	if err != nil || r.Status != 200 {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(r.Header.Get("Pico-Start-Offset"), 10, 64)
	next, err2 := strconv.ParseInt(r.Header.Get("Pico-Next-Offset"), 10, 64)
	return start, next, err1 == nil && err2 == nil && next >= start
}

// patch sends a PATCH /_streams body and returns the outcome.
func (w *deletionWorkload) patch(ctx context.Context, rng *rand.Rand, name string, body any) history.Outcome {
	b, _ := json.Marshal(body)
	r, err := send(ctx, w.client, "PATCH", w.base(rng)+"/_streams"+name, b, "Content-Type", "application/json")
	switch {
	case err != nil || r.Status >= 500:
		return history.Unknown
	case r.Status == 200:
		return history.OK
	default:
		return history.Failed
	}
}

// trim moves the start offset of a workload stream or a long-lived one
// into its readable range (refused at a fork's fork point).
func (w *deletionWorkload) trim(ctx context.Context, rng *rand.Rand) {
	var name string
	if rng.IntN(2) == 0 {
		name = w.mainStreams[rng.IntN(len(w.mainStreams))].name
	} else if s := w.pick(rng, false); s != nil {
		name = s.name
	} else {
		return
	}
	start, next, ok := w.head(ctx, rng, name)
	if !ok || next == start {
		return
	}
	to := start + 1 + rng.Int64N(next-start)
	t := history.Trim{Stream: name, To: to, Start: time.Now()}
	t.Outcome = w.patch(ctx, rng, name, map[string]int64{"trimBefore": to})
	t.End = time.Now()
	w.log.AddTrim(t)
}

// retention gives a workload stream a small size retention: the nodes'
// retention pass then trims it on its own.
func (w *deletionWorkload) retention(ctx context.Context, rng *rand.Rand) {
	s := w.pick(rng, false)
	if s == nil {
		return
	}
	t := history.Trim{Stream: s.name, Retention: true, Start: time.Now()}
	t.Outcome = w.patch(ctx, rng, s.name, map[string]int64{"retentionBytes": int64(100 + rng.IntN(400))})
	t.End = time.Now()
	w.log.AddTrim(t)
}

// delete deletes a workload stream (a source with live forks is hidden,
// its records kept for the forks), retrying an unknown outcome.
func (w *deletionWorkload) delete(ctx context.Context, rng *rand.Rand) {
	s := w.pick(rng, false)
	if s == nil {
		return
	}
	d := history.Delete{Stream: s.name, Start: time.Now(), Outcome: history.Unknown}
	for attempt := 0; attempt < 10 && ctx.Err() == nil; attempt++ {
		r, err := send(ctx, w.client, "DELETE", w.base(rng)+s.name, nil)
		if err == nil && (r.Status == 204 || r.Status == 404) {
			d.Outcome = history.OK
			break
		}
		if err == nil && r.Status < 500 {
			d.Outcome = history.Failed
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	d.End = time.Now()
	w.log.AddDelete(d)
	if d.Outcome != history.Failed {
		w.mu.Lock()
		s.deleted = true
		w.mu.Unlock()
	}
}

// readFork reads a fork whole, from its start offset: the checker compares
// every record below the fork point with its source's.
func (w *deletionWorkload) readFork(ctx context.Context, rng *rand.Rand) {
	f := w.pick(rng, true)
	if f == nil {
		return
	}
	base := w.base(rng)
	rd := history.Read{Client: 3000, Stream: f.name, Start: time.Now(), Node: base}
	recs, from, err := readAllRecords(w.client, base, f.name)
	rd.End = time.Now()
	if err != nil {
		return
	}
	rd.Outcome, rd.From, rd.Records = history.OK, from, recs
	w.log.AddRead(rd)
}

// readFromZero reads a page of a long-lived or workload stream at offset
// 0: once the stream is trimmed the read may be refused (410 with the
// start offset), but whatever it returns must be the records those offsets
// always named.
func (w *deletionWorkload) readFromZero(ctx context.Context, rng *rand.Rand) {
	var name string
	if rng.IntN(2) == 0 {
		name = w.mainStreams[rng.IntN(len(w.mainStreams))].name
	} else if s := w.pick(rng, false); s != nil {
		name = s.name
	} else {
		return
	}
	rd := readPage(ctx, w.client, w.base(rng), name, 0)
	if ctx.Err() != nil {
		return
	}
	rd.Client = 4000
	w.log.AddRead(rd)
}

// gcCounter sums the nodes' GC counters over a run in which nodes restart
// (and their counters start again from zero).
type gcCounter struct {
	last          map[string][2]float64 // node URL → (runs, deleted) last scraped
	runs, deleted float64
}

func (g *gcCounter) scrape(ctx context.Context, urls []string) {
	if g.last == nil {
		g.last = map[string][2]float64{}
	}
	for _, u := range urls {
		r, err := send(ctx, noRedirect, "GET", u+"/metrics", nil)
		if err != nil || r.Status != 200 {
			continue
		}
		now := [2]float64{promValue(r.Body, "picomq_gc_runs_total"), promValue(r.Body, "picomq_gc_deleted_objects_total")}
		prev := g.last[u]
		for i, v := range now {
			d := v - prev[i]
			if v < prev[i] { // restarted: counting from zero again
				d = v
			}
			if i == 0 {
				g.runs += d
			} else {
				g.deleted += d
			}
		}
		g.last[u] = now
	}
}

// promValue reads one unlabelled sample from a Prometheus text page (0 if
// absent).
func promValue(page []byte, name string) float64 {
	for _, line := range bytes.Split(page, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte(name+" ")); ok {
			v, _ := strconv.ParseFloat(string(rest), 64)
			return v
		}
	}
	return 0
}
