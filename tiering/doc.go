// Package tiering moves stream data from a node's WAL to object storage and
// back: it builds segment objects, uploads them safely, and names them.
//
// The pieces, each in its own package:
//
//	tiering/objstore   the object-store port: Store (file://, s3://), Open(url)
//	tiering/objstore/objstoretest   the acceptance suite every Store passes
//	tiering/segment    the object format: Writer, Reader, footer index, CRCs
//	tiering/cache      block cache (ristretto) with read-ahead; a segment.RangeReader
//	tiering/extent     Extent: a stream's range inside an object (also in manifests)
//	tiering            (this package) Tier, the port the stream service uses;
//	                   the Uploader; object names
//
// # Write path
//
// The stream service (node/stream, Service.Flush) collects every stream's
// batches that are in the WAL but not yet uploaded and uploads them as one
// object per flush, named L0Key(node, seq, NewNonce()), so PUTs follow
// bytes and time, not the number of streams. Tier.Upload (tier.go) hands
// them to Uploader.Upload, which builds the object with
// Build (segment format) and creates it conditionally, retrying transient
// failures. Each stream's extent.Extent (offset range, byte range,
// timestamps, CRC) comes back; the service commits them in one manifest, an
// etcd transaction conditioned on its lease, and only then lets the WAL drop
// the entries. A failed or fenced commit leaves an orphan object that no
// manifest names; the service's collector (node/stream/gc.go) deletes
// objects under L0NodePrefix(node) older than a grace period that no
// manifest references. Compaction (node/stream/compact.go) merges small
// objects into new ones, named the same way.
//
// # Read path
//
// A read below the uploaded offset asks Tier.ReadBatches for a stream's
// range (an ObjectRef: key, size, extent): small ranges are one ranged GET (segment.ReadStream), larger ones
// go through a segment.Reader opened on the footer; both read through the
// block cache (tiering/cache). Tier keeps a bounded set of opened footers,
// drops a corrupt object from the cache so the next read fetches it again,
// and logs and counts each corrupt object once. docs/architecture.md draws the whole path.
//
// # Names
//
//	l0/<node id>/<seq, 20 digits>-<nonce, 16 hex>   one flush or compaction of one node
//	streams/<stream id, 20 digits>/<base offset, 20 digits>   one stream's segment (L1)
//
// Every object name is built and parsed here (names.go). No code writes L1
// names yet: compaction keeps merged objects multi-stream (docs/storage.md);
// the layout is reserved so that per-stream segments stay possible.
//
// Zero padding makes lexical order (what List returns) numeric order, so
// listing a node's flushes or a stream's segments needs no sort. The L0
// nonce makes every upload attempt's name unique even if a crashed node
// reuses a sequence number; an L1 name is deterministic on purpose, so two
// owners (a zombie and its successor) compacting the same range collide on
// one key, and the conditional create lets exactly one of them win.
package tiering
