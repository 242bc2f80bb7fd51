package stream_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/wal"
)

// createMany creates n streams named prefix+i from c goroutines.
func createMany(ctx context.Context, svc *stream.Service, prefix string, n, c int) error {
	return testproc.Parallel(n, c, func(i int) error {
		name := fmt.Sprintf("%s%07d", prefix, i)
		if _, created, err := svc.Create(ctx, name, stream.CreateOptions{}); err != nil || !created {
			return fmt.Errorf("create %s: created=%v: %v", name, created, err)
		}
		return nil
	})
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkIdleStreams measures the stream service alone (no HTTP) over a
// real embedded etcd: the create rate of 32 concurrent creators, and the
// Go heap a second service holds per idle stream after loading them all
// from the registry (what a restarted node pays per stream, etcd's own
// memory not counted). PICOMQ_DENSITY_STREAMS sets the count (default
// 20,000).
func BenchmarkIdleStreams(b *testing.B) {
	n := testproc.EnvCount("PICOMQ_DENSITY_STREAMS", 20_000)
	ctx := context.Background()
	cli := metatest.StartEtcd(b)
	reg := meta.NewRegistry(cli, "/bench/")
	w, _, err := wal.Open(wal.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	svc, err := stream.Open(ctx, stream.Config{NodeID: "bench"}, w, reg)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := createMany(ctx, svc, "/idle/s-", n, 32); err != nil {
		b.Fatal(err)
	}
	rate := float64(n) / time.Since(start).Seconds()
	svc.Close()

	before := heapInUse()
	start = time.Now()
	again, err := stream.Open(ctx, stream.Config{NodeID: "bench"}, w, reg)
	if err != nil {
		b.Fatal(err)
	}
	load := time.Since(start)
	per := float64(heapInUse()-before) / float64(n)
	runtime.KeepAlive(again)
	fmt.Printf("\n%d idle streams: %.0f creates/s (32 creators); reopen loads them in %s; %.0f B of Go heap per loaded stream\n",
		n, rate, load.Round(time.Millisecond), per)
	b.ReportMetric(rate, "creates/s")
	b.ReportMetric(per, "heap-B/stream")
	b.ReportMetric(load.Seconds(), "load-s")
}
