package picomq_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// TestProducerPipelineOvertaken: batch 2 overtakes batch 1 on another
// connection (the proxy holds batch 1 until the server has answered batch
// 2). The server refuses batch 2 with a sequence gap, which tells the
// producer it was not written; the producer sends it again once batch 1 is
// acknowledged. Every record is written once, in Send order, and every ack
// carries its own position.
func TestProducerPipelineOvertaken(t *testing.T) {
	protocols(t, func(t *testing.T, c picomq.Client) {
		ctx := ctxTimeout(t, 60*time.Second)
		name := createStream(t, ctx, c, "application/json")
		seqHeader := producerSeqHeader(c.Protocol())
		px := newProxy(t, serverURL(c.Protocol()))
		var once1, once2 sync.Once
		answered2 := make(chan struct{})
		firstStatus2 := 0
		px.intercept = func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			if r.Method != http.MethodPost {
				return false
			}
			switch r.Header.Get(seqHeader) {
			case "1":
				held := false
				once1.Do(func() { held = true })
				if held { // first attempt of batch 1: let batch 2 go first
					select {
					case <-answered2:
					case <-time.After(20 * time.Second):
					}
				}
			case "2":
				first := false
				once2.Do(func() { first = true })
				if first {
					req, _ := http.NewRequestWithContext(r.Context(), r.Method, px.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
					req.Header = r.Header.Clone()
					resp, err := http.DefaultTransport.RoundTrip(req)
					if err != nil {
						close(answered2)
						panic(http.ErrAbortHandler)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					firstStatus2 = resp.StatusCode
					for k, v := range resp.Header {
						w.Header()[k] = v
					}
					w.WriteHeader(resp.StatusCode)
					_, _ = w.Write(b)
					close(answered2)
					return true
				}
			}
			return false
		}
		pc := newClient(t, c.Protocol(), px.URL)
		p, err := pc.Stream(name).NewProducer(picomq.ProducerOptions{MaxBatchRecords: 5, MaxInFlight: 4})
		if err != nil {
			t.Fatal(err)
		}
		const n = 60
		acks := make([]*picomq.PendingAck, n)
		for i := range n {
			if acks[i], err = p.Send(ctx, picomq.AppendRecord{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if firstStatus2 != http.StatusConflict {
			t.Fatalf("batch 2's first attempt was answered %d, want 409 (a sequence gap: batch 2 did not overtake batch 1)", firstStatus2)
		}
		for i, a := range acks {
			ack, err := a.Result()
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
			if ack.Start != c.PositionAt(int64(i)) {
				t.Fatalf("record %d acknowledged at %q, want %q", i, ack.Start, c.PositionAt(int64(i)))
			}
		}
		recs := readAll(t, ctx, c, name)
		checkCounting(t, recs, n, "")
	})
}

// TestProducerPipelineFailureMidway: the server refuses one batch for good
// (an invalid JSON record) while later batches are in flight. The producer
// fails: the records before that batch are acknowledged and written in
// order, that batch and every record after it fail, and nothing after it
// is written (the later batches meet a sequence gap on the server).
func TestProducerPipelineFailureMidway(t *testing.T) {
	ctx := ctxTimeout(t, 60*time.Second)
	c := newClient(t, picomq.ProtocolPico, serverURL(picomq.ProtocolPico))
	name := createStream(t, ctx, c, "application/json")
	p, err := c.Stream(name).NewProducer(picomq.ProducerOptions{MaxBatchRecords: 3, MaxInFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	const n, bad = 200, 101
	acks := make([]*picomq.PendingAck, 0, n)
	for i := range n {
		body := fmt.Appendf(nil, "%d", i)
		if i == bad {
			body = []byte("not json")
		}
		a, err := p.Send(ctx, picomq.AppendRecord{Body: body})
		if err != nil {
			break // the producer already failed: later Sends return its error
		}
		acks = append(acks, a)
	}
	if err := p.Close(ctx); picomq.ErrorKind(err) != picomq.KindBadRequest {
		t.Fatalf("Close: %v, want the bad record's error", err)
	}
	firstFailed := -1
	for i, a := range acks {
		_, err := a.Result()
		switch {
		case err != nil && firstFailed < 0:
			firstFailed = i
		case err == nil && firstFailed >= 0:
			t.Fatalf("record %d acknowledged after record %d failed", i, firstFailed)
		}
	}
	if firstFailed < 0 || firstFailed > bad {
		t.Fatalf("first failed record %d, want at most %d", firstFailed, bad)
	}
	checkCounting(t, readAll(t, ctx, c, name), firstFailed, ": exactly the acknowledged ones")
}
