package picomq

import (
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/PicoMQ/picomq/sdk/wire/codec"
	"github.com/PicoMQ/picomq/sdk/wire/recordbatch"
)

// lazyPage is a page of stored batches that a Records iterator decodes
// as Next hands its records out, so a catch-up builds no []Record per
// page: for a 1 MiB page of 1 KiB records that slice was 112 KiB of
// fresh memory full of pointers, which the GC then scans
// (docs/benchmarks.md, "The 100 cold readers' client"). Every batch's
// CRC-32C is still checked, when the reader enters the batch, before any
// of its records is handed out (recordbatch.Reader).
type lazyPage struct {
	name string // the stream, for errors
	r    recordbatch.Reader
	head codec.Record // the next record, read ahead: Position names it
	has  bool         // head is a record
	// digits holds the positions handed out, one after another: each
	// Position is a string over its bytes, which are never written again
	// (a full chunk is left to the strings that use it, not grown).
	digits []byte
	chunk  int   // the capacity of a new digits chunk
	last   int64 // the offset of the last record handed out, -1 for none
}

// newLazyPage starts reading body, a page of stored batches asked for at
// from, of about hint records whose positions are at most nextLen
// digits. A first batch that breaks the layout fails the page, as a
// whole-page decode would.
func newLazyPage(name string, body []byte, from int64, hint, nextLen int) (*lazyPage, error) {
	p := &lazyPage{name: name, r: recordbatch.NewReader(body, from), last: -1,
		chunk: min(max(hint*min(max(nextLen, 1), 20), 64), 16<<10)}
	p.head, p.has = p.r.Next()
	if err := p.err(); err != nil {
		return nil, err
	}
	return p, nil
}

// next returns the page's next record, false at its end or on an error
// (err).
func (p *lazyPage) next() (Record, bool) {
	if !p.has {
		return Record{}, false
	}
	r := p.head
	p.head, p.has = p.r.Next()
	p.last = r.Offset
	return Record{Position: p.position(r.Offset), Timestamp: time.UnixMilli(r.Timestamp), Key: r.Key, Body: r.Value, Headers: fromCodecHeaders(r.Headers)}, true
}

// position returns off in decimal, a string over the bytes appended to
// digits for it.
func (p *lazyPage) position(off int64) string {
	if cap(p.digits)-len(p.digits) < 20 {
		p.digits = make([]byte, 0, p.chunk)
	}
	n := len(p.digits)
	p.digits = strconv.AppendInt(p.digits, off, 10)
	return unsafe.String(&p.digits[n], len(p.digits)-n)
}

// err is what broke the page, nil if nothing did (yet).
func (p *lazyPage) err() error {
	if err := p.r.Err(); err != nil {
		return fmt.Errorf("picomq: GET %s: %w", p.name, err)
	}
	return nil
}

// nextPosition is the position of the page's next record; if the page
// broke, where to read again (resume); "" at the page's end.
func (p *lazyPage) nextPosition(from string) string {
	switch {
	case p.has:
		return strconv.FormatInt(p.head.Offset, 10)
	case p.r.Err() != nil:
		return p.resume(from)
	}
	return ""
}

// resume is where to read again after the page broke: after the last
// record handed out, or from, the page's start, if none was.
func (p *lazyPage) resume(from string) string {
	if p.last < 0 {
		return from
	}
	return strconv.FormatInt(p.last+1, 10)
}
