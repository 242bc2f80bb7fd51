// Package wal is the node-level write-ahead log that every stream on a PicoMQ
// node shares (docs/architecture.md, docs/durability.md). A produce request is acknowledged when its
// entry is in this log and fdatasync'ed; tiering later uploads the data and
// removes whole segments that object storage already covers.
//
// One log per node, instead of one per stream, means the number of fsyncs
// depends on load, not on how many streams are busy: a single writer goroutine
// gathers everything enqueued while the previous fdatasync was in flight,
// writes it with one pwrite and makes it durable with one fdatasync (group
// commit). Positions are handed out at Enqueue time, under the log's lock, so
// a caller can index an entry under its own lock in the same order the log
// will write it.
//
// A lone append on an idle log skips the writer goroutine: waking it and
// being woken by it again are two goroutine hand-offs, often two OS thread
// wake-ups, on every append of a single client. An entry of
// EnqueueForWait or Append that finds no commit running and nothing queued
// is left for its waiter, and Wait commits it in the caller's goroutine.
// Whoever commits (the writer, or such a waiter) holds the writer token, so
// segment state is still touched by one goroutine at a time; what is
// enqueued during a waiter's commit is the writer's next group, so group
// commit under load is unchanged and a waiter never commits more than the
// one group it waits for.
//
// Pending.WaitWritten returns earlier than Wait: once the commit's pwrite
// is done, before its fdatasync (the entry is in the OS page cache, safe
// from a process crash, not from power loss). A follower of a replicated
// stream answers on it with --replica-ack write; its fdatasync follows
// right after, in the writer goroutine, as any entry's.
//
// The writer runs that fdatasync without the writer token (group commit
// pipelining): it writes a group, gives the token back, then fdatasyncs
// what was written up to then and wakes those groups, moving the durable
// point to where the log was written when the fdatasync started. A
// WaitWritten caller whose entry arrives meanwhile takes the token and
// writes it at once, so a follower's next copy does not wait for the
// previous one's fdatasync; the next fdatasync covers it. An entry whose
// caller waits for the disk (Wait) and arrives during such an fdatasync
// is not left to its waiter: it joins the group the writer takes next,
// as under load before. fdatasyncs never run two at a time, and none
// runs after one failed.
//
// Unless it is lazy: with Options.LazySync > 0, a group made only of
// EnqueueLazy entries (a follower's copies with --replica-sync-interval)
// is written and not fdatasync'ed. The committer records it as unsynced
// and gives the writer token back; the next fdatasync of the segment,
// whoever runs it, makes it durable and completes its Wait. That is the
// next ordinary commit, or one the writer runs for the unsynced groups
// alone once LazySync has passed since the oldest of them was written (a
// timer), or Close. The durable point that ReadAt checks moves only with
// an fdatasync, so a lazy entry is not readable before it is durable. A
// follower that answers on the write thereby stops competing, once per
// request, for a disk it may share with the owner's fdatasync.
//
// # Directory layout
//
//	<dir>/
//	  LOCK                          flock(2)'ed while a process has the log open
//	  00000000000000000007.wal      oldest segment tiering has not released yet
//	  00000000000000000008.wal      active segment: the writer appends here
//	  00000000000000000009.wal.tmp  next segment, zero-filled in the background
//
// Segment numbers are contiguous; a gap means a file was lost and Open
// refuses the log. Numbers are never reused, so a Pos stays unambiguous after
// its segment is removed.
//
// # Segment file
//
//	0                                       end                   file size
//	+----------+----------+-----+----------+-------------------------------+
//	| record 0 | record 1 | ... | record n | 00 00 00 00 ... (preallocated) |
//	+----------+----------+-----+----------+-------------------------------+
//
// Segments are preallocated by writing zeros (and fsyncing them) before they
// are renamed into place. Overwriting blocks that are already allocated and
// written lets fdatasync skip the metadata (size, extent) update that
// appending, or writing into fallocate'd (unwritten) extents, costs on ext4.
// Measured on the development VM (ext4 on virtio): a single appender's p50
// ack latency was 20-25% lower in a zero-filled segment than in a growing
// file, and 64 KiB write+fdatasync ran ~900/s into a zero-filled file
// against ~450/s appending and ~270/s into an fallocate'd one, so fallocate
// is not used. The price is writing every segment twice, and zeros written
// while commits run slow the commits down (with 256 appenders, by up to a
// third while a whole segment was being filled). Spreading the fill out did
// not help measurably; what helps is not competing at all. So the next
// segment is filled only while the writer is idle (prealloc.go), and a
// rotation takes it however far the fill got: a lightly loaded log, whose
// latency is one fdatasync, gets preallocated segments; a saturated one,
// whose groups amortise the metadata update over many entries, extends its
// segments as it writes them. Open fills a new log's first segment in full.
// A record that does not fit in the rest of a segment goes to the next one;
// one larger than a whole segment gets a segment of its own.
//
// # Record
//
//	 0      1                5               9               13
//	+------+----------------+---------------+---------------+=================+
//	| kind | payload length | payload CRC   | header CRC    | payload         |
//	| 0x01 | uint32 LE      | uint32 LE     | uint32 LE     | (length bytes)  |
//	+------+----------------+---------------+---------------+=================+
//
//	payload CRC = CRC-32C(payload)
//	header CRC  = CRC-32C(segment number as uint64 LE ‖ record bytes 0..8)
//
// Pos.Offset is the offset of the payload, 13 bytes after the record start.
//
// The header has its own checksum so recovery can test "is there a record
// starting at byte x?" in constant time; that keeps the search for valid
// records behind a damaged one linear in the damaged region rather than
// quadratic. The header checksum covers the length and the payload checksum,
// so it transitively covers the payload. Seeding it with the segment number
// makes records in a renamed or misplaced segment file fail verification
// instead of being replayed under the wrong positions. Kind 0 never occurs, so
// an all-zero header is unambiguously "nothing was written here".
//
// # Recovery
//
// Open reads every segment in order. A segment's log ends at the first
// all-zero header, the first invalid record, or end of file. What follows
// must be zeros, except in the last segment, where non-zero bytes are the
// remains of a write the crash interrupted: they are zeroed, logged and
// reported in RecoveryReport, never silently dropped. Everything else is
// ErrCorrupt, naming segment and offset:
//   - damage in any segment but the last: the writer fdatasyncs a segment
//     before the next one is renamed into place, so an older segment cannot
//     end in a torn write;
//   - a valid record anywhere after the damaged one, even in the last
//     segment: a torn write only ever loses the end of the log.
//
// The second rule is deliberately conservative. After a power cut (not a
// process crash) the disk may persist pages of the final, unacknowledged
// write out of order, leaving a hole followed by a valid record; Open then
// refuses to guess and an operator decides. Acknowledged data is never
// discarded by that choice.
//
// # Filesystem
//
// Every file operation goes through FS (default OSFS, the real
// filesystem), so tests can run the log over wal/faultfs, which fails chosen
// calls and simulates power cuts by dropping whatever no completed Sync
// covered.
//
// # Failure
//
// A failed write or fdatasync fails the log permanently: after fsyncgate we
// cannot know what reached the disk, and retrying fdatasync can report success
// for pages the kernel already dropped. Every later call returns the error,
// wrapped around ErrFailed; the process is expected to restart and recover.
package wal
