package main

// picomq bench consumers: --consume tail (live readers from before the
// first append; each record carries its intended send time, so the
// append-to-delivery latency of every delivery is measured) or catchup
// (readers start once the producers have stopped and read everything from
// the start; records/s and MB/s).

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/PicoMQ/picomq/internal/hdr"
)

const (
	consumeTail    = "tail"
	consumeCatchup = "catchup"
)

// consumeResult is the --json "consume" object.
type consumeResult struct {
	Consumers int    `json:"consumers"`
	Mode      string `json:"mode"` // "tail" or "catchup"
	// Records and Bytes delivered: in tail mode those appended in the
	// measured time (to every consumer of their stream), in catch-up mode
	// everything read.
	Records       uint64  `json:"records"`
	Bytes         uint64  `json:"bytes"`
	Seconds       float64 `json:"durationSeconds"`
	RecordsPerSec float64 `json:"recordsPerSec"`
	MBPerSec      float64 `json:"mbPerSec"`
	// DeliveryLatencyMs (tail): from an append's intended send time to
	// its delivery to a consumer.
	DeliveryLatencyMs *latencyStats `json:"deliveryLatencyMs,omitempty"`
}

// benchConsumers are the running consumers of a run.
type benchConsumers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started time.Time
	from    int64 // tail: deliveries of records stamped before this are not measured
	stampAt int   // tail: where the send time is in a record; -1 = catch-up
	records atomic.Uint64
	bytes   atomic.Uint64
	mu      sync.Mutex
	hist    hdr.Histogram
	errMu   sync.Mutex
	err     error
}

// startConsumers starts n consumers of t, live or catching up.
func startConsumers(ctx context.Context, t benchTarget, n int, live bool, from int64, stampAt int) *benchConsumers {
	ctx, cancel := context.WithCancel(ctx)
	c := &benchConsumers{cancel: cancel, started: time.Now(), from: from, stampAt: stampAt}
	for i := range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			var mine hdr.Histogram
			err := t.consume(ctx, i, live, func(body []byte) {
				if stampAt >= 0 {
					sent := stampOf(body, stampAt)
					if sent < from {
						return // warm-up
					}
					mine.Record(time.Now().UnixNano() - sent)
				}
				c.records.Add(1)
				c.bytes.Add(uint64(len(body)))
			})
			c.mu.Lock()
			c.hist.Merge(&mine)
			c.mu.Unlock()
			if err != nil && !(live && errors.Is(err, context.Canceled)) {
				c.errMu.Lock()
				c.err = errors.Join(c.err, err)
				c.errMu.Unlock()
			}
		}()
	}
	return c
}

// wait waits for catch-up consumers to reach the end.
func (c *benchConsumers) wait() (consumeResult, error) {
	c.wg.Wait()
	c.cancel()
	return c.result(time.Since(c.started).Seconds(), nil), c.err
}

// drain lets live consumers receive what is still in flight after the
// producers stopped (until nothing arrives for a second, at most 15 s),
// then stops them; rates are over the measured time secs.
func (c *benchConsumers) drain(secs float64) (consumeResult, error) {
	last, quiet := c.records.Load(), time.Now()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && time.Since(quiet) < time.Second; {
		time.Sleep(100 * time.Millisecond)
		if n := c.records.Load(); n != last {
			last, quiet = n, time.Now()
		}
	}
	c.cancel()
	c.wg.Wait()
	l := latencyOf(&c.hist)
	return c.result(secs, &l), c.err
}

func (c *benchConsumers) result(secs float64, lat *latencyStats) consumeResult {
	recs, bytes := c.records.Load(), c.bytes.Load()
	return consumeResult{Records: recs, Bytes: bytes, Seconds: secs, RecordsPerSec: float64(recs) / secs,
		MBPerSec: float64(bytes) / 1e6 / secs, DeliveryLatencyMs: lat}
}

// stampDigits is the width of a send time in a record: decimal
// nanoseconds, then a space.
const stampDigits = 19

// stamp writes the send time into body at off (inside a JSON string's
// quotes on a JSON stream, so the record stays a valid JSON string).
func stamp(body []byte, off int, t time.Time) {
	b := strconv.AppendInt(body[off:off], t.UnixNano(), 10)
	for len(b) < stampDigits {
		b = append(b, ' ')
	}
	body[off+stampDigits] = ' '
}

// stampOf reads the send time stamp wrote (0 if there is none).
func stampOf(body []byte, off int) int64 {
	if len(body) < off+stampDigits {
		return 0
	}
	v, err := strconv.ParseInt(string(body[off:off+stampDigits]), 10, 64)
	if err != nil {
		return 0
	}
	return v
}
