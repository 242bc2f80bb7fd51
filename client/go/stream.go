package picomq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// stream implements Stream; the protocol-specific halves are in pico.go and
// ds.go.
type stream struct {
	c     *client
	name  string
	owner ownerCache

	mu          sync.Mutex
	contentType string // learned from Create/Head; Durable Streams appends need it
}

// PositionNow is the Durable Streams sentinel for a stream's current end.
// Pico has no such position; the SDK resolves it there with a HEAD request
// before reading.
const PositionNow = "now"

func (s *stream) Name() string { return s.name }

func (s *stream) checkName() error {
	if !strings.HasPrefix(s.name, "/") || len(s.name) < 2 {
		return fmt.Errorf("picomq: stream name %q: names are paths such as /orders/1042", s.name)
	}
	return nil
}

func (s *stream) ds() bool { return s.c.proto == ProtocolDurableStreams }

func (s *stream) setContentType(ct string) {
	if ct == "" {
		return
	}
	s.mu.Lock()
	s.contentType = ct
	s.mu.Unlock()
}

func (s *stream) cachedContentType() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contentType
}

// knownContentType returns the stream's content type, asking the server
// (HEAD) the first time.
func (s *stream) knownContentType(ctx context.Context) (string, error) {
	if ct := s.cachedContentType(); ct != "" {
		return ct, nil
	}
	info, err := s.Head(ctx)
	if err != nil {
		return "", err
	}
	return info.ContentType, nil
}

func (s *stream) Create(ctx context.Context, contentType string, retention time.Duration, opts ...CreateOption) (CreateResult, error) {
	if err := s.checkName(); err != nil {
		return CreateResult{}, err
	}
	var cfg createConfig
	for _, o := range opts {
		o(&cfg)
	}
	if s.ds() {
		return s.dsCreate(ctx, contentType, retention, cfg)
	}
	return s.picoCreate(ctx, contentType, retention, cfg)
}

func (s *stream) Append(ctx context.Context, records ...AppendRecord) (Ack, error) {
	if err := s.checkName(); err != nil {
		return Ack{}, err
	}
	if len(records) == 0 {
		return Ack{}, errors.New("picomq: Append needs at least one record")
	}
	if s.ds() {
		return s.dsAppend(ctx, records, nil)
	}
	return s.picoAppend(ctx, records, nil)
}

func (s *stream) Read(ctx context.Context, from string, opts ReadOptions) (Page, error) {
	if err := s.checkName(); err != nil {
		return Page{}, err
	}
	if s.ds() {
		return s.dsRead(ctx, from, opts)
	}
	return s.picoRead(ctx, from, opts)
}

func (s *stream) Head(ctx context.Context) (StreamInfo, error) {
	if err := s.checkName(); err != nil {
		return StreamInfo{}, err
	}
	if s.ds() {
		return s.dsHead(ctx)
	}
	return s.picoHead(ctx)
}

func (s *stream) Describe(ctx context.Context) (StreamInfo, error) {
	if s.ds() {
		return s.Head(ctx) // the protocol has no more to say than a HEAD
	}
	if err := s.checkName(); err != nil {
		return StreamInfo{}, err
	}
	return s.picoDescribe(ctx)
}

func (s *stream) Delete(ctx context.Context) error {
	if err := s.checkName(); err != nil {
		return err
	}
	resp, err := s.c.do(ctx, &call{method: "DELETE", path: s.name, owner: &s.owner})
	if err != nil {
		return err
	}
	drain(resp)
	s.mu.Lock()
	s.contentType = ""
	s.mu.Unlock()
	return nil
}

func (s *stream) Trim(ctx context.Context, before string) (StreamInfo, error) {
	if s.ds() {
		return StreamInfo{}, unsupported(s.c.proto, "Trim", "the protocol has no trimming")
	}
	if err := s.checkName(); err != nil {
		return StreamInfo{}, err
	}
	return s.picoTrim(ctx, before)
}

func (s *stream) CloseStream(ctx context.Context) (string, error) {
	if !s.ds() {
		return "", unsupported(s.c.proto, "CloseStream", "Pico streams cannot be closed")
	}
	if err := s.checkName(); err != nil {
		return "", err
	}
	return s.dsClose(ctx)
}

func (c *client) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	if c.proto == ProtocolDurableStreams {
		return ListPage{}, unsupported(c.proto, "List", "the protocol has no listing")
	}
	return c.picoList(ctx, opts)
}
