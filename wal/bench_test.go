package wal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// benchDir is where benchmarks put their files (testproc.BenchDir): the
// WAL and the fdatasync baseline use the same disk.
func benchDir(b *testing.B) string { return testproc.BenchDir(b, "walbench-") }

// percentileMicros returns the q-quantile of lat in microseconds; it sorts
// lat.
func percentileMicros(lat []time.Duration, q float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Microsecond)
}

// BenchmarkAppend measures acknowledged appends of a 100-byte payload from 1,
// 16, 64 and 256 concurrent appenders, each timing every Append it makes.
func BenchmarkAppend(b *testing.B) {
	for _, appenders := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("appenders=%d", appenders), func(b *testing.B) {
			w, _, err := Open(Options{Dir: benchDir(b), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			data := payload(1, 100)
			lat := make([][]time.Duration, appenders)
			for i := range lat {
				lat[i] = make([]time.Duration, 0, b.N/appenders+1)
			}
			var issued atomic.Int64
			var wg sync.WaitGroup
			ctx := context.Background()
			// The next segment's zero-fill runs in the writer's idle
			// time; let it finish first so the CPU figure is the
			// appends'.
			awaitPrepared(w)
			before := w.Stats()
			cpu0 := processCPU(b)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := range appenders {
				wg.Go(func() {
					l := lat[i]
					for issued.Add(1) <= int64(b.N) {
						t0 := time.Now()
						if _, err := w.Append(ctx, data); err != nil {
							b.Error(err)
							return
						}
						l = append(l, time.Since(t0))
					}
					lat[i] = l
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := processCPU(b) - cpu0
			after := w.Stats()
			all := slices.Concat(lat...)
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "appends/s")
			b.ReportMetric(percentileMicros(all, 0.50), "p50-ack-µs")
			b.ReportMetric(percentileMicros(all, 0.99), "p99-ack-µs")
			// CPU of the whole process per append.
			b.ReportMetric(float64(cpu.Microseconds())/float64(len(all)), "cpu-µs/append")
			if appenders == 1 {
				// The part of a lone append's latency that is not its
				// fdatasync: queueing, hand-offs, the write.
				beside := elapsed - (after.SyncTime - before.SyncTime)
				b.ReportMetric(float64(beside.Microseconds())/float64(len(all)), "µs-beside-fdatasync")
			}
			if groups := after.Groups - before.Groups; groups > 0 {
				b.ReportMetric(float64(after.Entries-before.Entries)/float64(groups), "entries/group")
			}
		})
	}
}

// BenchmarkFdatasyncBaseline is what durability costs without group commit:
// append 100 bytes, fdatasync, repeat, in the directory BenchmarkAppend
// uses.
func BenchmarkFdatasyncBaseline(b *testing.B) {
	f, err := os.Create(filepath.Join(benchDir(b), "baseline"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	data := payload(1, 100)
	lat := make([]time.Duration, 0, b.N)
	fd := int(f.Fd())
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		if _, err := f.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := unix.Fdatasync(fd); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(percentileMicros(lat, 0.50), "p50-µs")
	b.ReportMetric(percentileMicros(lat, 0.99), "p99-µs")
}

// processCPU is the user and system CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFollowerWrites is a --replica-ack write follower at one
// client: one entry at a time with EnqueueLazy and WaitWritten (what the
// follower answers on), the next one gap after the previous answer (the
// replication round trip). It reports the WaitWritten latency, and how
// many entries each fdatasync covered: when a write waits for the
// previous entry's fdatasync, the latency is about an fdatasync.
func BenchmarkFollowerWrites(b *testing.B) {
	for _, gap := range []time.Duration{0, 200 * time.Microsecond} {
		b.Run(fmt.Sprintf("gap=%s", gap), func(b *testing.B) {
			w, _, err := Open(Options{Dir: benchDir(b), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			awaitPrepared(w)
			data := payload(1, 100)
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			before := w.Stats()
			b.ResetTimer()
			for range b.N {
				if gap > 0 {
					time.Sleep(gap)
				}
				t := time.Now()
				p, err := w.EnqueueLazy(data)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.WaitWritten(ctx); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t))
			}
			b.StopTimer()
			after := w.Stats()
			b.ReportMetric(percentileMicros(lat, 0.5), "p50-µs")
			b.ReportMetric(percentileMicros(lat, 0.99), "p99-µs")
			if n := after.Syncs - before.Syncs; n > 0 {
				b.ReportMetric(float64(b.N)/float64(n), "entries/fdatasync")
			}
		})
	}
}
