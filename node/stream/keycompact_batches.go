package stream

// The record-level rule of key compaction (Kafka's log cleaner), apart
// from where its input comes from and where its output goes
// (keycompact.go), so it is tested on batches alone.

import (
	"fmt"

	"github.com/PicoMQ/picomq/record"
)

// keyCompactParams is what one compaction of a stream's range knows.
type keyCompactParams struct {
	// Start is the stream's start offset: records below it are gone for
	// readers already and are dropped.
	Start int64
	// Now (ms) and DeleteRetentionMs decide which tombstones go: a
	// tombstone (a keyed record with a null value) that is the latest of
	// its key is removed once its timestamp is DeleteRetentionMs old.
	Now, DeleteRetentionMs int64
	// Aborted lists the aborted transactions of the range: their data
	// records are dropped (read_committed readers never see them anyway).
	Aborted []AbortedTxn
}

// keyCompactStats counts what one compaction did.
type keyCompactStats struct {
	RecordsIn, RecordsOut int
	// Removed: records dropped because a later record has their key;
	// Tombstones: tombstones dropped after DeleteRetentionMs; Aborted:
	// records of aborted transactions dropped.
	Removed, Tombstones, Aborted int
	BytesIn, BytesOut            int64
	// OldestTombstone is the timestamp (ms) of the oldest tombstone kept;
	// 0 when none was kept.
	OldestTombstone int64
}

// compactBatches keeps, of batches (one stream's contiguous range, in
// offset order), the latest record of every key, and returns the batches
// that replace them. Offsets never change: a record keeps its offset, a
// batch its base offset and span, so the output covers exactly the
// input's offsets, with holes where records went (Kafka's rule; clients
// expect increasing offsets with gaps). Consecutive batches left without
// records become one empty batch, so the range stays contiguous for the
// object format. Control batches (transaction markers) are kept as they
// are; records without a key are kept (a compacted stream refuses them on
// append, but a stream made compacted later may hold some).
func compactBatches(batches [][]byte, p keyCompactParams) ([][]byte, keyCompactStats, error) {
	var st keyCompactStats
	latest := map[string]int64{}
	for _, b := range batches {
		h, err := record.ParseHeader(b)
		if err != nil {
			return nil, st, fmt.Errorf("compact keys: %w", err)
		}
		st.BytesIn += int64(len(b))
		if h.Control() || abortedData(h, p.Aborted) {
			continue
		}
		recs, err := record.DecodeRecords(b, nil)
		if err != nil {
			return nil, st, fmt.Errorf("compact keys: batch at offset %d: %w", h.BaseOffset, err)
		}
		for i := range recs {
			if r := &recs[i]; r.Key != nil && r.Offset >= p.Start {
				latest[string(r.Key)] = r.Offset
			}
		}
	}
	out := make([][]byte, 0, len(batches))
	// run is a stretch of batches left empty, written as one empty batch.
	var run struct {
		set            bool
		base, last, ts int64
	}
	flushRun := func() {
		if run.set {
			out = append(out, record.AppendEmptyBatch(nil, run.base, run.last, run.ts))
			run.set = false
		}
	}
	for _, b := range batches {
		h, _ := record.ParseHeader(b) // checked above
		if h.Control() {
			st.RecordsIn++
			st.RecordsOut++
			flushRun()
			out = append(out, b)
			continue
		}
		aborted := abortedData(h, p.Aborted)
		nb, kept, err := record.FilterBatch(nil, b, func(r *record.Record) bool {
			st.RecordsIn++
			switch {
			case r.Offset < p.Start:
				return false
			case aborted:
				st.Aborted++
				return false
			case r.Key == nil:
				return true
			case latest[string(r.Key)] != r.Offset:
				st.Removed++
				return false
			case r.Value == nil:
				if r.Timestamp+p.DeleteRetentionMs <= p.Now {
					st.Tombstones++
					return false
				}
				if st.OldestTombstone == 0 || r.Timestamp < st.OldestTombstone {
					st.OldestTombstone = max(r.Timestamp, 1)
				}
			}
			return true
		})
		if err != nil {
			return nil, st, fmt.Errorf("compact keys: batch at offset %d: %w", h.BaseOffset, err)
		}
		st.RecordsOut += kept
		if kept == 0 {
			if !run.set {
				run.set, run.base, run.ts = true, h.BaseOffset, h.MaxTimestamp
			}
			run.last, run.ts = h.LastOffset(), max(run.ts, h.MaxTimestamp)
			continue
		}
		flushRun()
		out = append(out, nb)
	}
	flushRun()
	for _, b := range out {
		st.BytesOut += int64(len(b))
	}
	return out, st, nil
}

// abortedData reports whether h is a data batch of an aborted transaction.
func abortedData(h record.BatchHeader, aborted []AbortedTxn) bool {
	return h.Transactional() && !h.Control() && hiddenFromCommitted(h, aborted)
}
