package metadata

// Reservation is how far a stream's owner may hand out offsets: an owner
// writes it before it acknowledges (or lets anyone read) a record at an
// offset, so a node taking the stream over knows that no offset at or
// above End was ever handed out, and starts there. With `local` durability
// the old owner may have acknowledged records it never uploaded; those are
// lost with it, and their offsets stay a gap instead of naming other
// records. One key per stream, written ahead in batches (node/stream).
type Reservation struct {
	// Epoch is the stream's fencing epoch of the owner that wrote it.
	Epoch int64 `json:"epoch"`
	// Base is the first offset that owner could hand out in its epoch
	// (where it started after taking the stream over).
	Base int64 `json:"base"`
	// End: no offset at or above it has been handed out.
	End int64 `json:"end"`
	// Rev is the key's etcd mod revision (0: no key), for the next write.
	Rev int64 `json:"-"`
}

// ReserveOp is one stream's new reservation, written only if the key's mod
// revision is still Prev (0: no key yet).
type ReserveOp struct {
	StreamID uint64
	Prev     int64
	Res      Reservation
}

// MaxReserveOps bounds the streams of one Reserve call (etcd's default
// limit is 128 operations per transaction, compares included).
const MaxReserveOps = 100
