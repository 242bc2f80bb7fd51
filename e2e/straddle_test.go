package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	picomq "github.com/PicoMQ/picomq/client/go"
	recbatch "github.com/PicoMQ/picomq/record"
	"github.com/PicoMQ/picomq/sdk/wire"
)

// TestStraddlingBatchesByteEqual: a stream of 1 MiB batches in objects of
// several MiB on MinIO, read cold (restarted node, no WAL) as Pico pages
// of stored batches and as Kafka fetches, comes back byte for byte the
// same both ways, every batch intact with the records appended; batches
// that straddle two of the block cache's 4 MiB GETs are among them (one
// in four at this size) and the node copied none of them
// (picomq_cache_straddle_copy_bytes_total stays 0: they were served as
// two pieces of the GETs' memory; the metric did not exist before).
func TestStraddlingBatchesByteEqual(t *testing.T) {
	m := startMinio(t)
	dir := t.TempDir()
	kaddr := freeAddr(t)
	n := startNodeEnv(t, dir, m.Env(), "--object-store", m.ObjectStoreURL(), "--kafka-addr", kaddr)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := picomq.NewPico(n.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Stream("/straddle/s")
	if _, err := s.Create(ctx, "application/octet-stream", 0); err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 12, 1024 // 12 batches of 1024 x 1 KiB
	for i := range batches {
		recs := make([]picomq.AppendRecord, perBatch)
		for j := range recs {
			recs[j].Body = bytes.Repeat([]byte(fmt.Sprintf("%05d-", i*perBatch+j)), 1024/6+1)[:1024]
		}
		if _, err := s.Append(ctx, recs...); err != nil {
			t.Fatal(err)
		}
	}
	restartCold(ctx, t, n, dir) // an empty cache: every read is cold
	const total = batches * perBatch

	// Pico pages of stored batches.
	var pico []byte
	for next := int64(0); next < total; {
		r := do(t, "GET", n.URL+"/straddle/s?offset="+strconv.FormatInt(next, 10), nil, "Accept", wire.MediaRecordBatches)
		wantStatus(t, r, 200, "read page")
		if ct := wire.MediaType(r.Header.Get("Content-Type")); ct != wire.MediaRecordBatches {
			t.Fatalf("page at %d: content type %q", next, ct)
		}
		nx, err := strconv.ParseInt(r.Header.Get(wire.HeaderNextOffset), 10, 64)
		if err != nil || nx <= next {
			t.Fatalf("page at %d: next offset %q", next, r.Header.Get(wire.HeaderNextOffset))
		}
		pico = append(pico, r.Body...)
		next = nx
	}
	if got := metric(t, n.URL, "picomq_cache_straddle_copy_bytes_total"); got != 0 {
		t.Errorf("Pico pages: %v bytes of straddling batches copied, want 0", got)
	}

	// Kafka fetches of the same history, raw (the batches as sent).
	n.stop(t)
	n.restart()
	cl := kafkaClient(t, kgo.SeedBrokers(kaddr))
	var kafka []byte
	for next := int64(0); next < total; {
		req := kmsg.NewPtrFetchRequest()
		req.MaxWaitMillis, req.MaxBytes, req.MinBytes = 500, 16<<20, 1
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "straddle.s"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = next, 8<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || len(p.RecordBatches) == 0 {
			t.Fatalf("fetch at %d: error %d, %d bytes", next, p.ErrorCode, len(p.RecordBatches))
		}
		if err := recbatch.WalkBatches(p.RecordBatches, func(_ []byte, h recbatch.BatchHeader) error {
			next = h.LastOffset() + 1
			return nil
		}); err != nil {
			t.Fatalf("fetch at %d: %v", next, err)
		}
		kafka = append(kafka, p.RecordBatches...)
	}
	if got := metric(t, n.URL, "picomq_cache_straddle_copy_bytes_total"); got != 0 {
		t.Errorf("Kafka fetches: %v bytes of straddling batches copied, want 0", got)
	}

	if !bytes.Equal(pico, kafka) {
		t.Fatalf("Pico pages (%d bytes) and Kafka fetches (%d bytes) differ", len(pico), len(kafka))
	}
	seen := 0
	err = recbatch.SplitBatches(pico, func(b []byte, h recbatch.BatchHeader) error {
		recs, err := recbatch.DecodeRecords(b, nil)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Offset != int64(seen) || !bytes.HasPrefix(r.Value, fmt.Appendf(nil, "%05d-", seen)) || len(r.Value) != 1024 {
				return fmt.Errorf("record at offset %d (want %d) holds %.12q", r.Offset, seen, r.Value)
			}
			seen++
		}
		return nil
	})
	if err != nil || seen != total {
		t.Fatalf("the batches read hold %d of %d records: %v", seen, total, err)
	}
}

// restartCold waits until node n (data dir dir) has flushed everything to
// object storage, stops it, removes its WAL and starts it again: every
// byte it then serves comes from object storage through an empty cache.
func restartCold(ctx context.Context, t *testing.T, n *proc, dir string) {
	t.Helper()
	for metric(t, n.URL, "picomq_unflushed_bytes") > 0 {
		if ctx.Err() != nil {
			t.Fatal("not flushed in time")
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.stop(t)
	if err := os.RemoveAll(filepath.Join(dir, "wal")); err != nil {
		t.Fatal(err)
	}
	n.restart()
}
