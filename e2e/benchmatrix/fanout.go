package main

import (
	"context"
	"fmt"
	"runtime/trace"
	"strconv"
	"sync"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/hdr"
)

// fanoutLoad is a live-tail measurement: readers SSE subscriptions of
// one stream, one writer appending rate records/s of size bytes.
type fanoutLoad struct {
	readers, rate, size int
	contentType         string
	d                   time.Duration
	// onEvent: the readers take their events in SubscribeOptions.OnEvent,
	// on the subscription's own goroutine, instead of from Events (the
	// client's lowest-latency delivery; the live-tail row uses it).
	onEvent bool
}

// fanout creates the stream name of load.contentType on c's server,
// subscribes load.readers readers (server-sent events, from the start),
// appends load.rate records/s for load.d, each carrying its send time, and
// returns the append-to-delivery latency over every delivery to every
// reader (from the moment the append was issued). The same code measures
// PicoMQ and a peer that speaks the same protocol.
func fanout(ctx context.Context, c picomq.Client, name string, load fanoutLoad) (*benchreport.Latency, error) {
	s := c.Stream(name)
	if _, err := s.Create(ctx, load.contentType, 0); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu sync.Mutex
		h  hdr.Histogram
		wg sync.WaitGroup
	)
	received := make(chan struct{}, 1<<16)
	for range load.readers {
		// Each reader's histogram is written only by its subscription's
		// deliveries, and merged once the subscription has ended.
		var mine hdr.Histogram
		deliver := func(ev picomq.Event) {
			now := time.Now().UnixNano()
			if trace.IsEnabled() && len(ev.Records) > 0 {
				// Where bench/traces' e2e chain ends (PICOMQ_BENCH_PROFILE_DIR).
				trace.Log(sctx, "picomq-bench", "delivered")
			}
			for _, r := range ev.Records {
				if sent := sentAt(r.Body); sent > 0 {
					mine.Record(now - sent)
				}
				select {
				case received <- struct{}{}:
				case <-sctx.Done():
				}
			}
		}
		opts := picomq.SubscribeOptions{}
		if load.onEvent {
			opts.OnEvent = deliver
		}
		sub, err := s.Subscribe(sctx, c.Beginning(), opts)
		if err != nil {
			return nil, fmt.Errorf("subscribe: %w", err)
		}
		defer sub.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range sub.Events() { // with OnEvent: closed at the end
				deliver(ev)
			}
			_ = sub.Close() // OnEvent is not running after Close
			mu.Lock()
			h.Merge(&mine)
			mu.Unlock()
		}()
	}
	// waitFor waits for k deliveries (all readers together).
	waitFor := func(k int, what string) error {
		deadline := time.After(30 * time.Second)
		for i := range k {
			select {
			case <-received:
			case <-deadline:
				return fmt.Errorf("%s: %d of %d deliveries after 30 s", what, i, k)
			}
		}
		return nil
	}
	// A first record (send time 0, not measured) shows every
	// subscription is live before the measured appends start.
	if _, err := s.Append(ctx, picomq.AppendRecord{Body: timedBody(0, load.size, load.contentType)}); err != nil {
		return nil, err
	}
	if err := waitFor(load.readers, "first record"); err != nil {
		return nil, err
	}
	interval := time.Second / time.Duration(load.rate)
	start := time.Now()
	sent := 0
	for k := 0; time.Since(start) < load.d; k++ {
		if w := time.Until(start.Add(time.Duration(k) * interval)); w > 0 {
			time.Sleep(w)
		}
		body := timedBody(time.Now().UnixNano(), load.size, load.contentType)
		if _, err := s.Append(ctx, picomq.AppendRecord{Body: body}); err != nil {
			return nil, err
		}
		sent++
	}
	if err := waitFor(sent*load.readers, "measured records"); err != nil {
		return nil, err
	}
	cancel() // ends the subscriptions; their readers merge their histograms
	wg.Wait()
	return latencyOf(&h), nil
}

// timedBody is a record of size bytes starting with the send time in
// decimal nanoseconds: a JSON string on a JSON stream, plain digits and
// padding otherwise.
func timedBody(nanos int64, size int, contentType string) []byte {
	b := make([]byte, 0, size)
	json := contentType == "application/json"
	if json {
		b = append(b, '"')
	}
	b = strconv.AppendInt(b, nanos, 10)
	b = append(b, ' ')
	for len(b) < size-1 {
		b = append(b, 'x')
	}
	if json {
		return append(b, '"')
	}
	return append(b, 'x')
}

// sentAt is the send time timedBody put into a record (0 if none).
func sentAt(body []byte) int64 {
	if len(body) > 0 && body[0] == '"' {
		body = body[1:]
	}
	var n int64
	for _, c := range body {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
