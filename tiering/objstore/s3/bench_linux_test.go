package s3_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/objstore/s3"
	"golang.org/x/sys/unix"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadRange measures this process's CPU per 64 MiB read from
// MinIO as 4 MiB ranged GETs, 16 in flight (what the block cache's
// read-ahead does), by the memory the body is read into:
//
//   - fresh: a new heap buffer per GET, in a heap that recycles its spans;
//   - reused: one buffer per worker (the floor of a bare GET loop);
//   - os, os-populate, os-huge: a fresh anonymous mapping per GET, faulted
//     page by page on the body's first write, pre-faulted in one
//     MADV_POPULATE_WRITE, or advised MADV_HUGEPAGE;
//   - heap-scavenged: a new heap buffer after debug.FreeOSMemory, i.e. the
//     heap's memory returned to the OS, as on a node that just started or
//     whose idle memory the scavenger released (the cold-read rows);
//   - heap-huge-in, heap-huge-out: the same, advised MADV_HUGEPAGE over the
//     whole huge pages inside the buffer, or rounded out to whole huge
//     pages (what tiering/cache does, sdk/hugepage.Advise).
//
// Only the reads are timed for CPU (cpu-ms/64MiB), not FreeOSMemory.
func BenchmarkReadRange(b *testing.B) {
	e := objstoretest.LookupS3Env(b)
	st, err := s3.New(b.Context(), s3.Options{Bucket: e.Bucket, Endpoint: e.Endpoint, Region: "us-east-1",
		AccessKey: e.AccessKey, SecretKey: e.SecretKey, Prefix: "bench-" + objstoretest.RandomHex(6)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const n, size = 16, 4 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("obj-%02d", i)
		data := make([]byte, size)
		rand.Read(data)
		if err := objstore.Put(b.Context(), st, keys[i], data, objstore.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, k := range keys {
			_ = st.Delete(b.Context(), k)
		}
	}()
	readInto := func(key string, buf []byte) {
		rc, err := st.ReadRange(b.Context(), key, 0, int64(len(buf)))
		if err != nil {
			b.Fatal(err)
		}
		var got int
		for got < len(buf) {
			m, err := rc.Read(buf[got:])
			got += m
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		rc.Close()
		if got != len(buf) {
			b.Fatalf("read %d of %d", got, len(buf))
		}
	}
	var sink atomic.Int64
	for _, mode := range []string{"fresh", "reused", "os", "os-populate", "os-huge", "heap-scavenged", "heap-huge-in", "heap-huge-out"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(n * size)
			var cpu time.Duration
			for b.Loop() {
				if strings.HasPrefix(mode, "heap") {
					debug.FreeOSMemory()
				}
				cpu0 := processCPU()
				var next atomic.Int64
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						var buf []byte
						for {
							i := next.Add(1) - 1
							if i >= n {
								return
							}
							var mem []byte
							switch mode {
							case "fresh":
								buf = make([]byte, size)
							case "heap-scavenged":
								buf = make([]byte, size)
							case "heap-huge-in", "heap-huge-out":
								buf = make([]byte, size)
								lo := uintptr(unsafe.Pointer(&buf[0]))
								hi := lo + size
								const h = 2 << 20
								if mode == "heap-huge-in" {
									lo, hi = (lo+h-1)&^(h-1), hi&^(h-1)
								} else {
									lo, hi = lo&^(h-1), (hi+h-1)&^(h-1)
								}
								if hi > lo {
									if _, _, e := unix.Syscall(unix.SYS_MADVISE, lo, hi-lo, unix.MADV_HUGEPAGE); e != 0 {
										b.Fatal(e)
									}
								}
							case "reused":
								if buf == nil {
									buf = make([]byte, size)
								}
							default:
								var err error
								mem, err = unix.Mmap(-1, 0, size+2<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
								if err != nil {
									b.Fatal(err)
								}
								buf = mem[:size]
								switch mode {
								case "os-populate":
									if err := unix.Madvise(buf, 23 /* MADV_POPULATE_WRITE */); err != nil {
										b.Fatal(err)
									}
								case "os-huge":
									if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil {
										b.Fatal(err)
									}
								}
							}
							readInto(keys[i], buf)
							sink.Add(int64(buf[0]))
							if mem != nil {
								_ = unix.Munmap(mem)
							}
						}
					})
				}
				wg.Wait()
				cpu += processCPU() - cpu0
			}
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/64MiB")
		})
	}
}
