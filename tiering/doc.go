// Package tiering moves stream data from a node's WAL to object storage and
// back: it builds segment objects, uploads them safely, and names them.
//
// The pieces, each in its own package:
//
//	tiering/objstore   the object-store port: Store (file://, s3://), Open(url)
//	tiering/objstore/objstoretest   the acceptance suite every Store passes
//	tiering/segment    the object format: Writer, Reader, footer index, CRCs
//	tiering/cache      block cache (ristretto) with read-ahead; a segment.RangeReader
//	tiering            (this package) object names and the Uploader
//
// # Write path (DESIGN 7b, L0)
//
// The node's flush loop collects every stream's batches that are in the WAL
// but not yet uploaded, and calls Uploader.UploadL0 once per flush: one
// object for all of them, so PUTs follow bytes and time, not the number of
// streams. UploadL0 returns each stream's StreamEntry (offset range, byte
// range, timestamps, CRC); the caller commits them in one etcd transaction
// conditioned on its lease, and only then lets the WAL drop the entries.
// A failed or fenced commit leaves an orphan object that no manifest names;
// a later sweep deletes l0/<node>/ objects older than a grace period that no
// manifest references.
//
// # Names
//
//	l0/<node id>/<seq, 20 digits>-<nonce>        one flush of one node (L0)
//	streams/<stream id, 20 digits>/<base offset, 20 digits>   one stream's segment (L1)
//
// Zero padding makes lexical order (what List returns) numeric order, so
// listing a node's flushes or a stream's segments needs no sort. The L0
// nonce makes every upload attempt's name unique even if a crashed node
// reuses a sequence number; an L1 name is deterministic on purpose, so two
// owners (a zombie and its successor) compacting the same range collide on
// one key, and the conditional create lets exactly one of them win.
package tiering
