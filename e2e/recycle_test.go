package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	picomq "github.com/PicoMQ/picomq/client/go"
	recbatch "github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// recycleValue is record off's value in TestColdReadersOverRecycledBuffers.
func recycleValue(stream string, off int64) []byte {
	return bytes.Repeat(fmt.Appendf(nil, "%s%07d-", stream, off), 1024/9+1)[:1024]
}

// TestColdReadersOverRecycledBuffers: a node with a small read cache
// (--cache-bytes 4 MiB, --read-ahead-bytes 8 MiB, --cache-pretouch),
// restarted without its WAL, serves two 16 MiB streams' history from
// MinIO to Kafka consumers (franz-go, which checks every batch's CRC) and
// Pico readers of stored batches at once; the cache evicts constantly
// and its GET buffers are recycled into other GETs while fetches and
// pages are written from them. Every record comes back intact, in order,
// on both protocols, and the node did recycle and reuse buffers (the
// metrics did not exist before this change).
func TestColdReadersOverRecycledBuffers(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	kaddr := freeAddr(t)
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--kafka-addr", kaddr,
		"--cache-bytes", "4194304", "--read-ahead-bytes", "8388608", "--cache-pretouch")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := picomq.NewPico(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	streams := []string{"a", "b"}
	const batches, perBatch = 16, 1024 // 16 MiB per stream, 1 MiB batches
	for _, name := range streams {
		s := c.Stream("/rp/" + name)
		if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
			t.Fatal(err)
		}
		for i := range batches {
			recs := make([]picomq.AppendRecord, perBatch)
			for j := range recs {
				recs[j].Body = recycleValue(name, int64(i*perBatch+j))
			}
			if _, err := s.Append(ctx, recs...); err != nil {
				t.Fatal(err)
			}
		}
	}
	restartCold(ctx, t, n, dir) // an empty cache: every read is cold
	if got := metric(t, n.URL, "picomq_cache_pooled_bytes"); got != 8<<20 {
		t.Errorf("pooled bytes after --cache-pretouch: %v, want %d", got, 8<<20)
	}
	const total = batches * perBatch

	var wg sync.WaitGroup
	errs := make(chan error, 2*2*len(streams))
	for pass := range 2 {
		for _, name := range streams {
			wg.Go(func() { // a Kafka consumer of the topic from the start
				cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("rp."+name),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(8<<20))
				if err != nil {
					errs <- err
					return
				}
				defer cl.Close()
				next := int64(0)
				for next < total {
					fs := cl.PollFetches(ctx)
					if err := fs.Err0(); err != nil {
						errs <- fmt.Errorf("kafka %s pass %d at %d: %w", name, pass, next, err)
						return
					}
					for it := fs.RecordIter(); !it.Done(); {
						r := it.Next()
						if r.Offset != next || !bytes.Equal(r.Value, recycleValue(name, next)) {
							errs <- fmt.Errorf("kafka %s pass %d: record at offset %d (want %d) holds %.16q", name, pass, r.Offset, next, r.Value)
							return
						}
						next++
					}
				}
			})
			wg.Go(func() { // a Pico reader of stored batches
				for next := int64(0); next < total; {
					r, err := tryDo(ctx, "GET", n.URL+"/rp/"+name+"?offset="+strconv.FormatInt(next, 10), nil, "Accept", wire.MediaRecordBatches)
					if err != nil || r.Status != 200 {
						errs <- fmt.Errorf("pico %s pass %d at %d: %v, status %d", name, pass, next, err, r.Status)
						return
					}
					at := next
					err = recbatch.SplitBatches(r.Body, func(b []byte, h recbatch.BatchHeader) error {
						recs, err := recbatch.DecodeRecords(b, nil)
						if err != nil {
							return err
						}
						for _, rec := range recs {
							if rec.Offset < at {
								continue // the page's first batch may start before it
							}
							if rec.Offset != next || !bytes.Equal(rec.Value, recycleValue(name, next)) {
								return fmt.Errorf("record at offset %d (want %d) holds %.16q", rec.Offset, next, rec.Value)
							}
							next++
						}
						return nil
					})
					if err != nil {
						errs <- fmt.Errorf("pico %s pass %d page at %d: %w", name, pass, at, err)
						return
					}
					if next == at {
						errs <- fmt.Errorf("pico %s pass %d: page at %d made no progress", name, pass, at)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := metric(t, n.URL, "picomq_cache_recycled_bytes_total"); got <= 0 {
		t.Errorf("picomq_cache_recycled_bytes_total %v: no buffer was recycled", got)
	}
	if got := metric(t, n.URL, "picomq_cache_reused_bytes_total"); got <= 0 {
		t.Errorf("picomq_cache_reused_bytes_total %v: no GET reused a buffer", got)
	}
	t.Logf("recycled %v bytes, reused %v, escaped runs %v", metric(t, n.URL, "picomq_cache_recycled_bytes_total"),
		metric(t, n.URL, "picomq_cache_reused_bytes_total"), metric(t, n.URL, "picomq_cache_escaped_runs_total"))
}
