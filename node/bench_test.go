package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/wal"
)

// countingTier counts PUTs (uploads) made through it.
type countingTier struct {
	*tiering.Tier
	puts  atomic.Int64
	bytes atomic.Int64
}

func (c *countingTier) Upload(ctx context.Context, key string, s []tiering.StreamBatches) ([]stream.ObjectRef, int64, error) {
	refs, n, err := c.Tier.Upload(ctx, key, s)
	if err == nil {
		c.puts.Add(1)
		c.bytes.Add(n)
	}
	return refs, n, err
}

// benchObjectStore is MinIO when PICOMQ_BENCH_S3 names an s3:// URL, else a
// local file store in the benchmark's temp dir.
func benchObjectStore(b *testing.B) string {
	if u := os.Getenv("PICOMQ_BENCH_S3"); u != "" {
		return u
	}
	return "file://" + b.TempDir()
}

// BenchmarkPUTsPerGiB measures object-store PUTs per GiB ingested with the
// default seal settings (8 MiB / 1 s), for one busy stream and for 10,000
// slow streams written concurrently. The flush design makes both the same:
// one object per flush whatever the number of streams. Target ≤ 300.
//
// Ingest is paced at a steady 12 MiB/s, below what one flush at a time can
// upload here, so flushes are sealed by size as in a healthy node. (Unpaced,
// the WAL and the file store share this VM's disk, each flush takes longer
// than the next 8 MiB take to arrive, and objects grow to tens of MiB: even
// fewer PUTs, which says nothing about the seal policy.)
func BenchmarkPUTsPerGiB(b *testing.B) {
	for _, streams := range []int{1, 10000} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			const volume = 192 << 20
			const recSize = 1024
			const rate = 12 << 20 // bytes per second
			ctx := context.Background()
			cli := metatest.StartEtcd(b)
			reg := meta.NewRegistry(cli, "/bench/")
			sess, err := reg.Join(ctx, metadata.Member{NodeID: "bench"}, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			w, _, err := wal.Open(wal.Options{Dir: b.TempDir(), Logger: log})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			ta, err := openTier(ctx, Config{ObjectStore: benchObjectStore(b), CacheBytes: 64 << 20}, log)
			if err != nil {
				b.Fatal(err)
			}
			tier := &countingTier{Tier: ta}
			svc, err := stream.Open(ctx, stream.Config{NodeID: "bench", Logger: log, Tier: stream.TierConfig{
				Tier: tier, Manifests: reg, Session: func() metadata.Lease { return meta.LeaseOf(sess) },
				SealMaxAge: time.Second, SealMaxBytes: 8 << 20,
			}}, w, reg)
			if err != nil {
				b.Fatal(err)
			}
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { svc.RunFlusher(fctx); close(done) }()
			names := make([]string, streams)
			for i := range names {
				names[i] = fmt.Sprintf("/bench/%d", i)
				if _, _, err := svc.Create(ctx, names[i], stream.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			val := make([]byte, recSize)
			b.ResetTimer()
			start := time.Now()
			for it := 0; it < b.N; it++ {
				var next atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < 64; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i*recSize > volume {
								return
							}
							due := start.Add(time.Duration(float64(i*recSize) / rate * float64(time.Second)))
							time.Sleep(time.Until(due)) // pacing, not synchronisation
							// 8 records per append, rotating over the streams.
							recs := make([]record.Record, 8)
							for k := range recs {
								recs[k].Value = val
							}
							if _, err := svc.Append(ctx, names[int(i)%streams], recs); err != nil {
								b.Error(err)
								return
							}
							next.Add(7)
						}
					}()
				}
				wg.Wait()
			}
			cancel()
			<-done // includes the final flush
			elapsed := time.Since(start)
			b.StopTimer()
			gib := float64(int64(b.N)*volume) / (1 << 30)
			b.ReportMetric(float64(tier.puts.Load())/gib, "PUTs/GiB")
			b.ReportMetric(float64(tier.bytes.Load())/float64(max(tier.puts.Load(), 1))/(1<<20), "MiB/PUT")
			b.ReportMetric(float64(int64(b.N)*volume)/elapsed.Seconds()/(1<<20), "ingest-MiB/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
