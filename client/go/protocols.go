package picomq

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/PicoMQ/picomq/sdk/wire"
)

// What the Pico and Durable Streams halves of Stream (pico.go, ds.go) do
// alike: the two protocols name their headers differently but append, read
// and describe a stream with the same steps.

// headerNames are one protocol's names for the headers both protocols have,
// so that appends and reads share one function per step.
type headerNames struct {
	producerID, producerEpoch, producerSeq string
	next, upToDate, closed, cursor         string
	// isTrue reads a boolean header: Durable Streams servers are read
	// leniently (case and spaces), Pico ones send exactly "true".
	isTrue func(h http.Header, name string) bool
}

var (
	picoHeaders = headerNames{
		producerID: wire.HeaderProducerID, producerEpoch: wire.HeaderProducerEpoch, producerSeq: wire.HeaderProducerSeq,
		next: wire.HeaderNextOffset, upToDate: wire.HeaderUpToDate, closed: wire.HeaderClosed, cursor: wire.HeaderCursor,
		isTrue: func(h http.Header, name string) bool { return h.Get(name) == "true" },
	}
	dsHeaders = headerNames{
		producerID: wire.DSHeaderProducerID, producerEpoch: wire.DSHeaderProducerEpoch, producerSeq: wire.DSHeaderProducerSeq,
		next: wire.DSHeaderNextOffset, upToDate: wire.DSHeaderUpToDate, closed: wire.DSHeaderClosed, cursor: wire.DSHeaderCursor,
		isTrue: headerTrue,
	}
)

func headerTrue(h http.Header, name string) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get(name)), "true")
}

// post appends body (of content type ct) to the stream, as producer p
// when p is not nil.
func (s *stream) post(ctx context.Context, n headerNames, ct string, body []byte, p *producerHeaders) (*http.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", ct)
	if p != nil {
		h.Set(n.producerID, p.id)
		h.Set(n.producerEpoch, strconv.FormatUint(p.epoch, 10))
		h.Set(n.producerSeq, strconv.FormatUint(p.seq, 10))
	}
	return s.c.do(ctx, &call{method: "POST", path: s.name, header: h, body: body, owner: &s.owner, message: true})
}

// setLongPoll asks a read to wait for records (both protocols spell the
// query the same).
func setLongPoll(q url.Values, opts ReadOptions) {
	if opts.LongPoll {
		q.Set(wire.QueryLive, wire.LiveLongPoll)
		if opts.Cursor != "" {
			q.Set(wire.QueryCursor, opts.Cursor)
		}
	}
}

// pageReply is one read response: the page's positions from its headers,
// and its body for the caller to decode into records.
type pageReply struct {
	page      Page
	header    http.Header
	body      []byte
	noContent bool             // a 204: nothing new, no body
	resp      *http.Response   // the unread body's response (startPage), nil once read
	alloc     func(int) []byte // the body's buffer of a known size (nil: fresh memory)
}

func (s *stream) getPage(ctx context.Context, n headerNames, q url.Values, reqHeader http.Header) (pageReply, error) {
	r, err := s.startPage(ctx, n, q, reqHeader)
	if err != nil {
		return pageReply{}, err
	}
	if err := r.readBody(); err != nil {
		return pageReply{}, err
	}
	return r, nil
}

// startPage sends a page GET and returns as soon as the response's headers
// are in: the page's Next, UpToDate, Closed and Cursor are known while its
// body is still unread (readBody reads it). A catch-up asks for the next
// page on that knowledge, so the node works on it while this body travels.
func (s *stream) startPage(ctx context.Context, n headerNames, q url.Values, reqHeader http.Header) (pageReply, error) {
	resp, err := s.c.do(ctx, &call{method: "GET", path: s.name, query: q, header: reqHeader, retry: true, owner: &s.owner})
	if err != nil {
		return pageReply{}, err
	}
	h := resp.Header
	r := pageReply{header: h, page: Page{
		Next:     h.Get(n.next),
		UpToDate: n.isTrue(h, n.upToDate),
		Closed:   n.isTrue(h, n.closed),
		Cursor:   h.Get(n.cursor),
	}}
	if resp.StatusCode == http.StatusNoContent {
		drain(resp)
		r.noContent = true
		return r, nil
	}
	r.resp = resp
	return r, nil
}

// readBody reads (and closes) the body of a reply from startPage.
func (r *pageReply) readBody() error {
	if r.resp == nil {
		return nil
	}
	resp := r.resp
	r.resp = nil
	var err error
	r.body, err = readAllInto(resp, r.alloc)
	return err
}

// head sends a HEAD for the stream and describes it: the name and content
// type (remembered) as both protocols give them, the rest by fill from the
// protocol's headers.
func (s *stream) head(ctx context.Context, fill func(info *StreamInfo, h http.Header)) (StreamInfo, error) {
	resp, err := s.c.do(ctx, &call{method: "HEAD", path: s.name, retry: true, owner: &s.owner})
	if err != nil {
		return StreamInfo{}, err
	}
	drain(resp)
	info := StreamInfo{Name: s.name, ContentType: resp.Header.Get("Content-Type")}
	s.setContentType(info.ContentType)
	fill(&info, resp.Header)
	return info, nil
}
