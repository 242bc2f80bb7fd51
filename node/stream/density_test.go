package stream_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
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
// 20,000); PICOMQ_DENSITY_HEAPPROFILE=FILE writes the heap profile of the
// loaded service there, PICOMQ_DENSITY_CPUPROFILE=FILE the CPU profile of
// the reopen.
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
	withCreated := heapInUse()
	svc.Close()
	svc = nil
	before := heapInUse()
	created := float64(withCreated-before) / float64(n)

	stopProfile := startCPUProfile(b, os.Getenv("PICOMQ_DENSITY_CPUPROFILE"))
	start, cpu := time.Now(), cpuTime()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	again, err := stream.Open(ctx, stream.Config{NodeID: "bench"}, w, reg)
	if err != nil {
		b.Fatal(err)
	}
	load, loadCPU := time.Since(start), cpuTime()-cpu
	stopProfile()
	runtime.ReadMemStats(&ms1)
	per := float64(heapInUse()-before) / float64(n)
	if path := os.Getenv("PICOMQ_DENSITY_HEAPPROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
	runtime.KeepAlive(again)
	fmt.Printf("\n%d idle streams: %.0f creates/s (32 creators); %.0f B of Go heap per stream held by the service that created them\n"+
		"reopen loads them in %s (%s CPU, etcd's side included; %.0f B allocated and %.1f allocations per stream); %.0f B of Go heap per loaded stream\n",
		n, rate, created, load.Round(time.Millisecond), loadCPU.Round(time.Millisecond),
		float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), float64(ms1.Mallocs-ms0.Mallocs)/float64(n), per)
	b.ReportMetric(rate, "creates/s")
	b.ReportMetric(created, "created-heap-B/stream")
	b.ReportMetric(per, "heap-B/stream")
	b.ReportMetric(load.Seconds(), "load-s")
	b.ReportMetric(loadCPU.Seconds(), "load-cpu-s")
	b.ReportMetric(load.Seconds(), "load-s")
}

// writeHeapProfile writes the live heap to path while the loaded service
// is still reachable (go test's -memprofile is written after the
// benchmark, when it is not any more).
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// startCPUProfile profiles the CPU into path until the returned func is
// called; no path, no profile.
func startCPUProfile(b *testing.B, path string) (stop func()) {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
