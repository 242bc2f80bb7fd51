// Command natsload is the NATS JetStream side of `make bench`: the same
// closed-loop single-record append load that `picomq bench` puts on a
// PicoMQ node, put on a JetStream file stream, plus a catch-up read and a
// live-tail latency run. It prints one JSON object in the field names of
// `picomq bench --json` so the matrix runner reads both the same way.
//
//	natsload pub     -url nats://127.0.0.1:P -c 64 -size 100 -d 5s [-warmup 1s] -subject bench.x
//	natsload fill    -url ... -subject bench.x -n 10000 -size 1024  (async publishes, waits for every ack)
//	natsload catchup -url ... -subject bench.x            (reads subject's messages from the start)
//	natsload tail    -url ... -subject bench.t -rate 200 -d 5s
//
// The stream (BENCH on bench.>, file storage, one replica) is created if
// missing; the server's sync_interval decides whether each ack waited for
// fsync (make bench runs it with sync_interval: always).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

type latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

type result struct {
	Mode            string  `json:"mode"`
	Producers       int     `json:"producers"`
	RecordSize      int     `json:"recordSize"`
	DurationSeconds float64 `json:"durationSeconds"`
	Appends         int64   `json:"appends"`
	Records         int64   `json:"records"`
	Bytes           int64   `json:"bytes"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"firstError,omitempty"`
	RecordsPerSec   float64 `json:"recordsPerSec"`
	MBPerSec        float64 `json:"mbPerSec"`
	AckLatencyMs    latency `json:"ackLatencyMs"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: natsload pub|catchup|tail [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("natsload "+os.Args[1], flag.ExitOnError)
	url := fs.String("url", nats.DefaultURL, "server URL")
	subject := fs.String("subject", "bench.x", "subject (under the stream's bench.>)")
	c := fs.Int("c", 1, "publishers (one connection each)")
	size := fs.Int("size", 100, "bytes per message")
	d := fs.Duration("d", 5*time.Second, "measured time")
	warmup := fs.Duration("warmup", 0, "unmeasured time before")
	rate := fs.Float64("rate", 200, "tail: messages/s")
	count := fs.Int("n", 10000, "fill: messages")
	_ = fs.Parse(os.Args[2:])
	var res result
	var err error
	switch os.Args[1] {
	case "pub":
		res, err = pub(*url, *subject, *c, *size, *warmup, *d)
	case "fill":
		res, err = fill(*url, *subject, *count, *size)
	case "catchup":
		res, err = catchup(*url, *subject)
	case "tail":
		res, err = tail(*url, *subject, *size, *rate, *d)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsload:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

// connect opens a connection and makes sure the bench stream exists.
func connect(url string) (*nats.Conn, nats.JetStreamContext, error) {
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := nc.JetStream(nats.MaxWait(30 * time.Second))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if _, err := js.StreamInfo("BENCH"); errors.Is(err, nats.ErrStreamNotFound) {
		_, err = js.AddStream(&nats.StreamConfig{Name: "BENCH", Subjects: []string{"bench.>"},
			Storage: nats.FileStorage, Replicas: 1})
		if err != nil && !errors.Is(err, nats.ErrStreamNameAlreadyInUse) {
			nc.Close()
			return nil, nil, fmt.Errorf("add stream: %w", err)
		}
	} else if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("stream info: %w", err)
	}
	return nc, js, nil
}

// pub: c publishers, each publishing one message and waiting for its ack,
// back to back (closed loop), on its own connection.
func pub(url, subject string, c, size int, warmup, d time.Duration) (result, error) {
	var measuring atomic.Bool
	var appends, fails atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, c)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	conns := make([]nats.JetStreamContext, c)
	for i := range conns {
		nc, js, err := connect(url)
		if err != nil {
			return result{}, err
		}
		defer nc.Close()
		conns[i] = js
	}
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = 'a' + byte(i%26)
	}
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := subject + "." + strconv.Itoa(i)
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				_, err := conns[i].Publish(subj, msg)
				dt := time.Since(t0)
				if !measuring.Load() {
					continue
				}
				if err != nil {
					fails.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				appends.Add(1)
				lat[i] = append(lat[i], dt)
			}
		}()
	}
	time.Sleep(warmup)
	measuring.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	el := time.Since(t0)
	close(stop)
	wg.Wait()
	res := result{Mode: "closed", Producers: c, RecordSize: size, DurationSeconds: el.Seconds(),
		Appends: appends.Load(), Records: appends.Load(), Errors: fails.Load()}
	res.Bytes = res.Records * int64(size)
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	res.RecordsPerSec = float64(res.Records) / el.Seconds()
	res.MBPerSec = float64(res.Bytes) / 1e6 / el.Seconds()
	res.AckLatencyMs = stats(slices.Concat(lat...))
	if res.Appends == 0 {
		return res, fmt.Errorf("no publish acknowledged: %s", res.FirstError)
	}
	return res, nil
}

// fill publishes n messages asynchronously (at most 1024 unacknowledged)
// and waits until every one is acknowledged.
func fill(url, subject string, n, size int) (result, error) {
	nc, js, err := connect(url)
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	ajs, err := nc.JetStream(nats.PublishAsyncMaxPending(4096))
	if err != nil {
		return result{}, err
	}
	_ = js // connect made sure the stream exists
	msg := make([]byte, size)
	t0 := time.Now()
	// Chunks of 1024 publishes, each waited for, keep the client below
	// its pending limit (beyond it PublishAsync fails with a stall).
	for done := 0; done < n; {
		for k := 0; k < 1024 && done < n; k, done = k+1, done+1 {
			if _, err := ajs.PublishAsync(subject, msg); err != nil {
				return result{}, err
			}
		}
		select {
		case <-ajs.PublishAsyncComplete():
		case <-time.After(5 * time.Minute):
			return result{}, errors.New("fill: acks did not arrive")
		}
	}
	el := time.Since(t0)
	return result{Mode: "fill", Records: int64(n), DurationSeconds: el.Seconds(), RecordsPerSec: float64(n) / el.Seconds()}, nil
}

// catchup reads every message stored under subject from the start with
// an ordered consumer (the reader a replaying client uses).
func catchup(url, subject string) (result, error) {
	nc, js, err := connect(url)
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	info, err := js.StreamInfo("BENCH", &nats.StreamInfoRequest{SubjectsFilter: subject})
	if err != nil {
		return result{}, err
	}
	total := int64(info.State.Subjects[subject])
	if total == 0 {
		return result{}, errors.New("no messages under " + subject)
	}
	t0 := time.Now()
	sub, err := js.SubscribeSync(subject, nats.OrderedConsumer(), nats.DeliverAll())
	if err != nil {
		return result{}, err
	}
	defer sub.Unsubscribe()
	var n, bytes int64
	for n < total {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			return result{}, fmt.Errorf("after %d of %d: %w", n, total, err)
		}
		n++
		bytes += int64(len(m.Data))
	}
	el := time.Since(t0)
	return result{Mode: "catchup", DurationSeconds: el.Seconds(), Records: n, Bytes: bytes,
		RecordsPerSec: float64(n) / el.Seconds(), MBPerSec: float64(bytes) / 1e6 / el.Seconds()}, nil
}

// tail publishes at a fixed rate, each message carrying its send time, to
// a live push consumer, and measures publish-to-delivery latency.
func tail(url, subject string, size int, rate float64, d time.Duration) (result, error) {
	nc, js, err := connect(url)
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	var mu sync.Mutex
	var lat []time.Duration
	got := make(chan struct{}, 1<<16)
	sub, err := js.Subscribe(subject, func(m *nats.Msg) {
		if len(m.Data) >= 8 {
			sent := int64(0)
			for _, b := range m.Data[:8] {
				sent = sent<<8 | int64(b)
			}
			mu.Lock()
			lat = append(lat, time.Duration(time.Now().UnixNano()-sent))
			mu.Unlock()
		}
		select {
		case got <- struct{}{}:
		default:
		}
	}, nats.DeliverNew(), nats.AckNone())
	if err != nil {
		return result{}, err
	}
	defer sub.Unsubscribe()
	msg := make([]byte, max(size, 8))
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var sent, fails int64
	for k := 0; time.Since(start) < d; k++ {
		if w := time.Until(start.Add(time.Duration(k) * interval)); w > 0 {
			time.Sleep(w)
		}
		now := time.Now().UnixNano()
		for i := 7; i >= 0; i-- {
			msg[i] = byte(now)
			now >>= 8
		}
		if _, err := js.Publish(subject, msg); err != nil {
			fails++
			continue
		}
		sent++
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := int64(len(lat))
		mu.Unlock()
		if n >= sent || time.Now().After(deadline) {
			break
		}
		select {
		case <-got:
		case <-time.After(100 * time.Millisecond):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	el := time.Since(start)
	return result{Mode: "tail", RecordSize: size, DurationSeconds: el.Seconds(), Appends: sent, Records: int64(len(lat)),
		Errors: fails, RecordsPerSec: float64(len(lat)) / el.Seconds(), AckLatencyMs: stats(lat)}, nil
}

func stats(l []time.Duration) latency {
	if len(l) == 0 {
		return latency{}
	}
	slices.Sort(l)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(l)))) - 1
		return float64(l[max(i, 0)]) / 1e6
	}
	var sum time.Duration
	for _, x := range l {
		sum += x
	}
	return latency{P50: at(0.5), P90: at(0.9), P99: at(0.99), P999: at(0.999), Max: float64(l[len(l)-1]) / 1e6,
		Mean: float64(sum) / float64(len(l)) / 1e6}
}
