package tiering

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/faultproxy"
	"github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
	"github.com/PicoMQ/picomq/tiering/segment"
	"github.com/PicoMQ/picomq/tiering/segment/segmenttest"
)

// TestReadsThroughStoreFaults reads stored batches through the block
// cache while the object store in front of it drops connections, answers
// 500, stalls and cuts bodies short. A read may fail (it is retried);
// it must never return bytes other than those written, and a transport
// failure must never be taken for a corrupt or truncated object: that
// logs a false alarm, and a short GET kept in the cache as the object's
// end fails every later read of the range until the cache forgets it.
func TestReadsThroughStoreFaults(t *testing.T) {
	env := objstoretest.LookupS3Env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", env.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", env.SecretKey)
	proxy, err := faultproxy.Start(env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })

	prefix := "faults-" + objstoretest.RandomHex(8)
	direct, err := storeurl.Open(t.Context(), env.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	proxied := env
	proxied.Endpoint = proxy.URL()
	viaProxy, err := storeurl.Open(t.Context(), proxied.URL(prefix))
	if err != nil {
		t.Fatal(err)
	}
	writer, err := NewTier(direct, TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	// Three objects of three streams each, ~3 MiB a stream.
	type stream struct {
		ref   ObjectRef
		whole []byte
	}
	var streams []stream
	for o := range 3 {
		var sb []StreamBatches
		for s := range 3 {
			sb = append(sb, StreamBatches{Stream: uint64(10*o + s + 1), Batches: segmenttest.Stream(0, 300, 10, 1000, 1)})
		}
		refs, _, err := writer.Upload(t.Context(), L0Key("n", uint64(o+1), NewNonce()), sb)
		if err != nil {
			t.Fatal(err)
		}
		for i, ref := range refs {
			streams = append(streams, stream{ref, bytes.Join(sb[i].Batches, nil)})
		}
	}
	// A small cache, so reads keep going to the store.
	tier, err := NewTier(viaProxy, TierOptions{CacheBytes: 1 << 20, ReadAheadBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()

	ctx, stop := context.WithTimeout(t.Context(), 8*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var reads, failed atomic.Int64
	var corrupt atomic.Value
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for ctx.Err() == nil {
				s := streams[rng.IntN(len(streams))]
				ref := s.ref
				// From the start or a random batch on, a few pages.
				off := ref.First
				if rng.IntN(2) == 0 {
					off = ref.First + rng.Int64N(ref.Next-ref.First)
				}
				for range 1 + rng.IntN(8) {
					if off >= ref.Next {
						break
					}
					rctx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(1500))*time.Millisecond)
					pieces, release, err := tier.ReadBatchPieces(rctx, &ref, off, 512<<10)
					cancel()
					if err != nil {
						if errors.Is(err, segment.ErrCorrupt) {
							corrupt.Store(err)
						}
						failed.Add(1)
						break
					}
					page := bytes.Join(pieces, nil)
					var first int64 = -1
					werr := record.WalkPieces(pieces, func(_ [][]byte, h record.BatchHeader, _ int) error {
						if first < 0 {
							first = h.BaseOffset
						}
						off = h.LastOffset() + 1
						return nil
					})
					if release != nil {
						release()
					}
					if werr != nil || first < 0 || !bytes.Contains(s.whole, page) {
						t.Errorf("stream %d from %d: a page of %d bytes that is not the batches written (%v)", ref.StreamID, first, len(page), werr)
						return
					}
					reads.Add(1)
				}
			}
		}()
	}
	modes := []faultproxy.Mode{faultproxy.Pass, faultproxy.Down, faultproxy.Error, faultproxy.Slow, faultproxy.Cut}
	for ctx.Err() == nil {
		proxy.Set(modes[rand.IntN(len(modes))], time.Duration(50+rand.IntN(400))*time.Millisecond)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+rand.IntN(250)) * time.Millisecond):
		}
	}
	proxy.Set(faultproxy.Pass, 0)
	wg.Wait()
	t.Logf("%d pages read, %d reads failed under faults", reads.Load(), failed.Load())
	if err, _ := corrupt.Load().(error); err != nil {
		t.Errorf("a read through a failing store reported corruption: %v", err)
	}
	if n := tier.CorruptObjects(); n != 0 {
		t.Errorf("%d objects marked corrupt after transport faults", n)
	}
	if reads.Load() == 0 || failed.Load() == 0 {
		t.Fatalf("%d pages read, %d failed: the faults did not meet the reads", reads.Load(), failed.Load())
	}
	// Every stream reads back whole once the store is healthy.
	for _, s := range streams {
		ref := s.ref
		var got []byte
		for off := ref.First; off < ref.Next; {
			b, err := tier.ReadBatches(t.Context(), &ref, off, 1<<20)
			if err != nil {
				t.Fatalf("stream %d at %d after the faults: %v", ref.StreamID, off, err)
			}
			if err := record.SplitBatches(b, func(_ []byte, h record.BatchHeader) error {
				off = h.LastOffset() + 1
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got = append(got, b...)
		}
		if !bytes.Equal(got, s.whole) {
			t.Fatalf("stream %d reads back %d bytes, not the %d written", ref.StreamID, len(got), len(s.whole))
		}
	}
}
