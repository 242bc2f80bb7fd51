// Package extent is the one description of "a stream's range inside an
// object" that the object format (tiering/segment: a footer entry), the
// registry (meta: a manifest entry) and the stream service (an object
// reference in its offset index) share. It is a leaf: meta, which may not
// import the rest of tiering, records extents in its manifests.
package extent

// Extent is where offsets [First, Next) of one stream lie in one object:
// bytes [Offset, Offset+Length), in Batches whole RecordBatch v2 batches.
// It is all a reader needs to read the range from its start with one
// ranged GET, without the object's footer. The JSON names are those of
// the manifests in etcd (docs/storage.md) and must not change.
type Extent struct {
	StreamID       uint64 `json:"id"`
	First          int64  `json:"first"`             // base offset of the first batch
	Next           int64  `json:"next"`              // one past the last record's offset
	Offset         int64  `json:"off"`               // byte offset of the range in the object
	Length         int64  `json:"len"`               // byte length of the range
	CRC            uint32 `json:"crc,omitempty"`     // CRC-32C of the byte range
	Batches        int    `json:"batches,omitempty"` // number of batches in the range
	FirstTimestamp int64  `json:"firstTs,omitempty"` // first batch's firstTimestamp (ms)
	MaxTimestamp   int64  `json:"maxTs,omitempty"`   // largest batch maxTimestamp (ms)
}

// End is the byte position just after the range.
func (e Extent) End() int64 { return e.Offset + e.Length }

// Last is the offset of the range's last record.
func (e Extent) Last() int64 { return e.Next - 1 }
