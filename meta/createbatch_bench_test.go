package meta_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
	"github.com/PicoMQ/picomq/meta/metatest"
)

// BenchmarkCreateOnTwoNodes: two registries, each with its own etcd
// client (two nodes), create b.N streams between them from 32 goroutines
// each, with derived topic aliases as HTTP creates have. Reports creates
// per second and the CPU of the whole process (both registries and the
// embedded etcd) per create. It shows what creates on one node cost the
// creates on another; the embedded etcd does not fsync (metatest), so it
// measures contention, not the disk.
func BenchmarkCreateOnTwoNodes(b *testing.B) {
	e, _ := metatest.StartEmbedded(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var regs []*meta.Registry
	for range 2 {
		cli, err := meta.Dial(ctx, e.Endpoints())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cli.Close() })
		regs = append(regs, meta.NewRegistry(cli, "/bench/"))
	}
	benchCreates(b, regs)
}

// BenchmarkCreateOneNode: one registry creates b.N streams from 32
// goroutines, its create transactions sent over gRPC (an external etcd's
// way) or in-process (Embedded.KV, a node with the embedded etcd). Reports
// creates per second and the process's CPU (registry and etcd) per create;
// the embedded etcd does not fsync (metatest).
func BenchmarkCreateOneNode(b *testing.B) {
	for _, inProcess := range []bool{false, true} {
		b.Run(map[bool]string{false: "grpc", true: "in-process"}[inProcess], func(b *testing.B) {
			e, cli := metatest.StartEmbedded(b)
			reg := meta.NewRegistry(cli, "/bench/")
			if inProcess {
				reg.UseKV(e.KV())
			}
			benchCreates(b, []*meta.Registry{reg})
		})
	}
}

// benchCreates creates b.N streams with derived topic aliases (as HTTP
// creates have) from 32 goroutines per registry and reports creates per
// second and CPU per create.
func benchCreates(b *testing.B, regs []*meta.Registry) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := processCPU()
	b.ResetTimer()
	start := time.Now()
	for _, reg := range regs {
		for range 32 {
			wg.Go(func() {
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					name := fmt.Sprintf("/b/%d", i)
					if _, _, err := reg.CreateStream(ctx, metadata.Stream{Name: name, KafkaTopic: fmt.Sprintf("b.%d", i)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
	b.ReportMetric((processCPU()-cpu0).Seconds()*1e6/float64(b.N), "cpu-µs/create")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
