package picomq_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// Producer throughput over HTTP against the real server TestMain starts,
// next to the same-run baseline: a raw loop of binary batch appends of the
// same batch size, one request at a time over one connection, with no SDK
// in between. The raw loop is the ceiling of a one-in-flight producer; the
// gap between the two is the SDK's cost.
//
//	go test -run '^$' -bench . ./client/go/   (or: make bench-micro)

var benchSizes = []struct {
	name string
	size int
}{{"100B", 100}, {"1KiB", 1024}}

// recordsPerBatch is how many records of size bytes fill the producer's
// default batch (1 MiB encoded, at most 10000 records).
func recordsPerBatch(size int) int {
	return min((1<<20-codec.FrameHeaderSize)/(codec.RecordOverhead+size), 10000)
}

func benchStream(b *testing.B) string {
	b.Helper()
	c, err := picomq.NewPico(picoURL)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	name := uniqueName(b)
	if _, err := c.Stream(name).Create(context.Background(), "application/octet-stream", 0); err != nil {
		b.Fatal(err)
	}
	return name
}

func reportRecords(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkProducer: one producer's records/s, with one batch in flight
// (the producer before pipelining) and with the default four, in the same
// run.
func BenchmarkProducer(b *testing.B) {
	for _, bs := range benchSizes {
		for _, inflight := range []int{1, 4} {
			benchProducer(b, bs.name, bs.size, inflight)
		}
	}
}

func benchProducer(b *testing.B, name string, size, inflight int) {
	b.Run(fmt.Sprintf("%s/inflight=%d", name, inflight), func(b *testing.B) {
		ctx := context.Background()
		c, err := picomq.NewPico(picoURL)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		p, err := c.Stream(benchStream(b)).NewProducer(picomq.ProducerOptions{MaxInFlight: inflight})
		if err != nil {
			b.Fatal(err)
		}
		body := bytes.Repeat([]byte("x"), size)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := p.Send(ctx, picomq.AppendRecord{Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		reportRecords(b)
		p.Close(ctx)
	})
}

func BenchmarkRawBatchAppend(b *testing.B) {
	for _, bs := range benchSizes {
		b.Run(bs.name, func(b *testing.B) {
			url := picoURL + benchStream(b)
			hc := &http.Client{}
			per := recordsPerBatch(bs.size)
			rec := codec.Record{Value: bytes.Repeat([]byte("x"), bs.size)}
			frame := func(n int) []byte {
				dst := codec.AppendFrameHeader(nil, n)
				for range n {
					dst = codec.AppendRecord(dst, &rec)
				}
				return dst
			}
			full := frame(per)
			b.SetBytes(int64(bs.size))
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(per, b.N-sent)
				body := full
				if n < per {
					body = frame(n)
				}
				resp, err := hc.Post(url, wire.MediaBatch, bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("append: %d", resp.StatusCode)
				}
				sent += n
			}
			b.StopTimer()
			reportRecords(b)
		})
	}
}
