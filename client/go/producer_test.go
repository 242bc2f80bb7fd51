package picomq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

func serverURL(p picomq.Protocol) string {
	if p == picomq.ProtocolDurableStreams {
		return dsURL
	}
	return picoURL
}

// readAll reads a stream from the beginning to its end.
func readAll(t testing.TB, ctx context.Context, c picomq.Client, name string) []picomq.Record {
	t.Helper()
	var out []picomq.Record
	for rec, err := range c.Stream(name).Records(c.Beginning(), picomq.RecordsOptions{}).All(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

func TestProducer(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		name := createStream(t, ctx, c, "application/json")
		s := c.Stream(name)
		p, err := s.NewProducer(picomq.ProducerOptions{MaxBatchRecords: 500})
		if err != nil {
			t.Fatal(err)
		}
		const n = 3000
		acks := make([]*picomq.PendingAck, n)
		for i := range n {
			if acks[i], err = p.Send(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			ack, err := a.Result()
			if err != nil || ack.Start != c.PositionAt(int64(i)) || ack.Next != c.PositionAt(int64(i+1)) || ack.Duplicate {
				t.Fatalf("ack %d: %+v %v", i, ack, err)
			}
		}
		last, err := p.SendDurable(ctx, picomq.AppendRecord{Body: []byte(`"last"`)})
		if err != nil || last.Start != c.PositionAt(n) {
			t.Fatalf("SendDurable: %+v %v", last, err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Send(ctx, picomq.AppendRecord{Body: []byte(`1`)}); !errors.Is(err, picomq.ErrProducerClosed) {
			t.Fatalf("Send after Close: %v", err)
		}
		recs := readAll(t, ctx, c, name)
		if len(recs) != n+1 {
			t.Fatalf("%d records, want %d", len(recs), n+1)
		}
		for i := range n {
			if want := fmt.Sprintf(`{"i":%d}`, i); string(recs[i].Body) != want {
				t.Fatalf("record %d: %s, want %s", i, recs[i].Body, want)
			}
		}
	})
}

// TestProducerRetryAfterDroppedConnection: the proxy forwards a batch, the
// server writes it, and the connection dies before the answer. The
// producer sends the batch again under the same sequence number; the
// server acknowledges it as a duplicate and nothing is written twice.
func TestProducerRetryAfterDroppedConnection(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		name := createStream(t, ctx, c, "application/json")
		seqHeader := producerSeqHeader(c.Protocol())
		px := newProxy(t, serverURL(c.Protocol()))
		// Hold the first attempt of batch 2 until batch 1 is written, then
		// forward it and drop the answer, so the server writes batch 2
		// (batches are pipelined: an attempt that overtook batch 1 would
		// be refused with a sequence gap instead).
		var droppedAt atomic.Int32
		droppedAt.Store(-1)
		batch1Written := func() bool {
			for _, sr := range px.requests() {
				if sr.Method == http.MethodPost && sr.ReqHeader.Get(seqHeader) == "1" && sr.Status/100 == 2 {
					return true
				}
			}
			return false
		}
		px.dropResponse = func(r *http.Request, idx int) bool {
			if r.Method != http.MethodPost || r.Header.Get(seqHeader) != "2" || !droppedAt.CompareAndSwap(-1, int32(idx)) {
				return false
			}
			for deadline := time.Now().Add(20 * time.Second); !batch1Written() && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond) // await batch 1's answer (bounded)
			}
			return true
		}
		pc := newClient(t, c.Protocol(), px.URL,
			picomq.WithRetryPolicy(picomq.RetryPolicy{MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}))
		p, err := pc.Stream(name).NewProducer(picomq.ProducerOptions{MaxBatchRecords: 10})
		if err != nil {
			t.Fatal(err)
		}
		const n = 100
		var acks []*picomq.PendingAck
		for i := range n {
			a, err := p.Send(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, "%d", i)})
			if err != nil {
				t.Fatal(err)
			}
			acks = append(acks, a)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		for i, a := range acks {
			if _, err := a.Result(); err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		}
		recs := readAll(t, ctx, c, name)
		checkCounting(t, recs, n, ": the retry wrote a batch twice or lost one")
		// The proxy saw the dropped batch written, then its retry with
		// the same sequence acknowledged as a duplicate.
		idx := int(droppedAt.Load())
		if idx < 0 {
			t.Fatal("batch 2 was never sent after batch 1 was written")
		}
		seen := px.requests()
		dropped := seen[idx]
		seq := dropped.ReqHeader.Get(seqHeader)
		var retry seenRequest
		for _, r := range seen[idx+1:] {
			if r.ReqHeader.Get(seqHeader) == seq {
				retry = r
				break
			}
		}
		if dropped.Status != http.StatusOK && dropped.Status != http.StatusNoContent {
			t.Fatalf("the dropped batch was answered %d by the server", dropped.Status)
		}
		if seq == "" || retry.ReqHeader == nil {
			t.Fatalf("no retry of the dropped batch (sequence %q)", seq)
		}
		if string(dropped.Body) != string(retry.Body) {
			t.Fatalf("the retry sent another body:\n%q\n%q", dropped.Body, retry.Body)
		}
		dup := retry.Header.Get("Pico-Duplicate") == "true"
		if c.Protocol() == picomq.ProtocolDurableStreams {
			dup = retry.Status == http.StatusNoContent
		}
		if !dup {
			t.Fatalf("the retry was not acknowledged as a duplicate: status %d, headers %v", retry.Status, retry.Header)
		}
		if a, _ := acks[n-1].Result(); a.Next != c.PositionAt(n) {
			t.Fatalf("last ack %+v", a)
		}
	})
}

// TestProducerFenced: a producer with a higher epoch fences the old one,
// whose next batch fails for good and poisons it.
func TestProducerFenced(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 30*time.Second)
		name := createStream(t, ctx, c, "text/plain")
		s := c.Stream(name)
		id := "fixed-" + strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", "-")
		old, _ := s.NewProducer(picomq.ProducerOptions{ID: id, Epoch: 1})
		if _, err := old.SendDurable(ctx, picomq.AppendRecord{Body: []byte("a")}); err != nil {
			t.Fatal(err)
		}
		newer, _ := s.NewProducer(picomq.ProducerOptions{ID: id, Epoch: 2})
		if _, err := newer.SendDurable(ctx, picomq.AppendRecord{Body: []byte("b")}); err != nil {
			t.Fatal(err)
		}
		pending, err := old.Send(ctx, picomq.AppendRecord{Body: []byte("zombie")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = pending.Wait(ctx)
		var ce *picomq.ClientError
		if !picomq.IsKind(err, picomq.KindFenced) || !errors.As(err, &ce) || ce.CurrentEpoch == nil || *ce.CurrentEpoch != 2 {
			t.Fatalf("zombie batch: %v, want KindFenced with current epoch 2", err)
		}
		if _, err := old.Send(ctx, picomq.AppendRecord{Body: []byte("more")}); !picomq.IsKind(err, picomq.KindFenced) {
			t.Fatalf("Send on a failed producer: %v", err)
		}
		if err := old.Close(ctx); !picomq.IsKind(err, picomq.KindFenced) {
			t.Fatalf("Close of a failed producer: %v", err)
		}
		// Recovery: a new producer with a higher epoch.
		next, _ := s.NewProducer(picomq.ProducerOptions{ID: id, Epoch: 3})
		if _, err := next.SendDurable(ctx, picomq.AppendRecord{Body: []byte("c")}); err != nil {
			t.Fatal(err)
		}
		next.Close(ctx)
		newer.Close(ctx)
		var got []string
		for _, r := range readAll(t, ctx, c, name) {
			got = append(got, string(r.Body))
		}
		if strings.Join(got, "") != "abc" {
			t.Fatalf("stream holds %q, want a b c", got)
		}
	})
}

// TestProducerIDReuse: a second producer with the same ID and epoch would
// have its batches taken for retries of the first one's; the SDK notices
// and fails instead of reporting records as written.
func TestProducerIDReuse(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	s := c.Stream(createStream(t, ctx, c, "text/plain"))
	opts := picomq.ProducerOptions{ID: "reused-" + fmt.Sprint(time.Now().UnixNano())}
	p1, _ := s.NewProducer(opts)
	if _, err := p1.SendDurable(ctx, picomq.AppendRecord{Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	p2, _ := s.NewProducer(opts)
	if _, err := p2.SendDurable(ctx, picomq.AppendRecord{Body: []byte("second")}); err == nil || !strings.Contains(err.Error(), "same ID and epoch") {
		t.Fatalf("reused ID and epoch: %v", err)
	}
	if recs := readAll(t, ctx, c, s.Name()); len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
}

// TestProducerBadRecordPoisons: a batch the server refuses (invalid JSON)
// fails the producer and every record queued behind it.
func TestProducerBadRecordPoisons(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	c := newClient(t, picomq.ProtocolPico, picoURL)
	s := c.Stream(createStream(t, ctx, c, "application/json"))
	p, _ := s.NewProducer(picomq.ProducerOptions{})
	bad, err := p.Send(ctx, picomq.AppendRecord{Body: []byte("{not json")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Wait(ctx); !picomq.IsKind(err, picomq.KindBadRequest) {
		t.Fatalf("bad record: %v", err)
	}
	if !picomq.IsKind(p.Err(), picomq.KindBadRequest) {
		t.Fatalf("Err: %v", p.Err())
	}
	if err := p.Flush(ctx); !picomq.IsKind(err, picomq.KindBadRequest) {
		t.Fatalf("Flush: %v", err)
	}
	// Oversized records are refused by Send itself, without failing.
	p2, _ := s.NewProducer(picomq.ProducerOptions{MaxBatchBytes: 1024})
	if _, err := p2.Send(ctx, picomq.AppendRecord{Body: make([]byte, 2048)}); err == nil {
		t.Fatal("an oversized record was accepted")
	}
	if p2.Err() != nil {
		t.Fatal("an oversized record failed the producer")
	}
}

// TestProducerBackpressure: Send blocks while MaxBufferedBytes are
// unacknowledged, until its context ends or acks free room.
func TestProducerBackpressure(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	direct := newClient(t, picomq.ProtocolPico, picoURL)
	name := createStream(t, ctx, direct, "text/plain")
	px := newProxy(t, picoURL)
	release := make(chan struct{})
	px.intercept = func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		if r.Method == http.MethodPost {
			<-release
		}
		return false
	}
	c := newClient(t, picomq.ProtocolPico, px.URL)
	p, _ := c.Stream(name).NewProducer(picomq.ProducerOptions{MaxBatchBytes: 1024, MaxBufferedBytes: 1024})
	rec := picomq.AppendRecord{Body: make([]byte, 400)}
	for range 2 {
		if _, err := p.Send(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	// The first batch is held by the proxy: 800 bytes are buffered and a
	// third record does not fit.
	px.waitArrival(t, 10*time.Second, func(r seenRequest) bool { return r.Method == http.MethodPost })
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := p.Send(sctx, rec)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send with a full buffer: %v, want it to block until its deadline", err)
	}
	close(release)
	third, err := p.Send(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := third.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if recs := readAll(t, ctx, direct, name); len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
}

// TestProducerLingerAndFlush: with a long Linger nothing goes out until
// Flush, which sends everything as one batch.
func TestProducerLingerAndFlush(t *testing.T) {
	ctx := ctxTimeout(t, 30*time.Second)
	direct := newClient(t, picomq.ProtocolPico, picoURL)
	name := createStream(t, ctx, direct, "text/plain")
	px := newProxy(t, picoURL)
	c := newClient(t, picomq.ProtocolPico, px.URL)
	p, _ := c.Stream(name).NewProducer(picomq.ProducerOptions{Linger: time.Hour})
	for i := range 10 {
		if _, err := p.Send(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	var posts int
	for _, r := range px.requests() {
		if r.Method == http.MethodPost {
			posts++
		}
	}
	if posts != 1 {
		t.Fatalf("%d POSTs, want the 10 records in one batch", posts)
	}
	// Close does not wait for the linger either.
	if _, err := p.Send(ctx, picomq.AppendRecord{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if recs := readAll(t, ctx, direct, name); len(recs) != 11 {
		t.Fatalf("%d records", len(recs))
	}
}
