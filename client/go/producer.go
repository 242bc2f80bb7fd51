package picomq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/sdk/wire"
	"github.com/PicoMQ/picomq/sdk/wire/codec"
)

// ProducerOptions tune a Producer. Zero values get the defaults below.
type ProducerOptions struct {
	// ID identifies the producer to the server, which accepts each
	// (ID, Epoch, sequence) once. Default: a random ID, new for every
	// Producer. A fixed ID lets a restarted process fence its previous
	// incarnation, but then every new Producer with that ID needs an
	// Epoch higher than the last one used (see KindFenced).
	ID string
	// Epoch of this producer session (default 0).
	Epoch uint64
	// MaxBatchBytes bounds the encoded size of one batch (default 1 MiB;
	// the server's default limit for a request body is 4 MiB). A record
	// larger than this is refused by Send.
	MaxBatchBytes int
	// MaxBatchRecords bounds the records of one batch (default 10000, the
	// server's default limit).
	MaxBatchRecords int
	// Linger is how long the producer waits for more records before
	// sending a batch that is not full (default 0: a batch goes as soon as
	// the previous one is acknowledged, so batches grow with load).
	Linger time.Duration
	// MaxBufferedBytes bounds the bytes of records sent but not yet
	// acknowledged (default 32 MiB); Send blocks while it is reached.
	MaxBufferedBytes int
	// DeliveryTimeout is how long one batch is retried after network
	// errors and 429/5xx answers before the producer gives up and fails
	// (default 2 minutes).
	DeliveryTimeout time.Duration
}

const (
	defaultMaxBatchBytes    = 1 << 20
	defaultMaxBatchRecords  = 10000
	defaultMaxBufferedBytes = 32 << 20
	defaultDeliveryTimeout  = 2 * time.Minute
)

// ErrProducerClosed is returned by Send after Close, and completes the acks
// of records that Close abandoned.
var ErrProducerClosed = errors.New("picomq: producer closed")

// Producer appends records to one stream in batches, with the
// idempotent-producer headers (Pico-Producer-Id/-Epoch/-Seq, or the Durable
// Streams Producer-* headers): every batch gets the next sequence number, and
// a batch whose outcome is unknown (connection lost, 5xx, 429) is sent
// again with the same sequence number, which the server acknowledges
// without writing it twice. One batch is in flight at a time, so records
// are appended in Send order.
//
// A batch that fails for good (a 4xx answer such as a fenced epoch or an
// invalid record, or retries exhausted) fails the producer: that batch and
// every record after it fail with the error, and Send returns it from then
// on. Recover with a new Producer — with the same ID, a higher Epoch.
//
// A Producer is safe for concurrent use. Close it when done.
type Producer struct {
	s    *stream
	opts ProducerOptions
	ctx  context.Context // ends when Close gives up waiting
	stop context.CancelFunc

	mu         sync.Mutex
	queue      recordQueue // not yet in a batch
	queueBytes int
	batchBuf   []pendingRecord // the batch in flight (one at a time)
	ackSlab    []PendingAck    // acks are allocated in slabs
	buffered   int             // bytes queued or in flight
	enqueued   uint64          // records accepted by Send, ever
	taken      uint64          // records put into batches, ever
	resolved   uint64          // records whose ack is complete, ever
	flushUntil uint64          // send without lingering until taken reaches it
	seq        uint64
	err        error // the failure that poisoned the producer
	closed     bool
	started    bool
	wake       chan struct{}
	changed    chan struct{} // closed (and replaced) on progress
	stopped    chan struct{}
}

type pendingRecord struct {
	rec  AppendRecord
	size int
	ack  *PendingAck
}

// PendingAck is the future acknowledgement of one record given to Send.
type PendingAck struct {
	mu       sync.Mutex
	done     chan struct{} // made on first use: most acks are never awaited one by one
	finished bool
	ack      Ack // the batch's; per-record positions are computed by Result
	offset   int64
	c        *client // non-nil: the record's positions derive from offset
	err      error
}

// Done is closed when the record is acknowledged or has failed.
func (a *PendingAck) Done() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = make(chan struct{})
		if a.finished {
			close(a.done)
		}
	}
	return a.done
}

// resolve completes the ack. With c set, the record is at offset and its
// positions are rendered when asked for, not for every record.
func (a *PendingAck) resolve(ack Ack, c *client, offset int64, err error) {
	a.mu.Lock()
	a.ack, a.c, a.offset, a.err, a.finished = ack, c, offset, err, true
	if a.done != nil {
		close(a.done)
	}
	a.mu.Unlock()
}

// Wait waits for the acknowledgement. Cancelling ctx stops the wait, not
// the delivery.
func (a *PendingAck) Wait(ctx context.Context) (Ack, error) {
	select {
	case <-a.Done():
		return a.Result()
	case <-ctx.Done():
		return Ack{}, ctx.Err()
	}
}

// Result returns the outcome, or an error if the ack is still pending.
func (a *PendingAck) Result() (Ack, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.finished {
		return Ack{}, errors.New("picomq: ack still pending")
	}
	ack := a.ack
	if a.c != nil {
		ack.Start, ack.Next = a.c.PositionAt(a.offset), a.c.PositionAt(a.offset+1)
	}
	return ack, a.err
}

func (s *stream) NewProducer(opts ProducerOptions) (*Producer, error) {
	if err := s.checkName(); err != nil {
		return nil, err
	}
	if opts.ID == "" {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		opts.ID = "go-" + hex.EncodeToString(b[:])
	}
	if len(opts.ID) > 256 {
		return nil, errors.New("picomq: producer ID longer than 256 bytes")
	}
	for i := 0; i < len(opts.ID); i++ {
		if c := opts.ID[i]; c < 0x21 || c > 0x7e {
			return nil, fmt.Errorf("picomq: producer ID %q: visible ASCII only", opts.ID)
		}
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = defaultMaxBatchBytes
	}
	if opts.MaxBatchRecords <= 0 {
		opts.MaxBatchRecords = defaultMaxBatchRecords
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = defaultMaxBufferedBytes
	}
	opts.MaxBufferedBytes = max(opts.MaxBufferedBytes, opts.MaxBatchBytes)
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = defaultDeliveryTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Producer{
		s: s, opts: opts, ctx: ctx, stop: cancel,
		wake: make(chan struct{}, 1), changed: make(chan struct{}), stopped: make(chan struct{}),
	}, nil
}

// ID returns the producer's ID.
func (p *Producer) ID() string { return p.opts.ID }

// Epoch returns the producer's epoch.
func (p *Producer) Epoch() uint64 { return p.opts.Epoch }

// Err returns the error that failed the producer, or nil.
func (p *Producer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// notify wakes everyone waiting for progress; p.mu is held.
func (p *Producer) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Producer) kick() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Send queues rec for the next batch and returns its pending ack. It blocks
// while MaxBufferedBytes are waiting for acknowledgement (until ctx ends).
// It fails at once if the producer failed or was closed, or if rec can
// never be sent.
func (p *Producer) Send(ctx context.Context, rec AppendRecord) (*PendingAck, error) {
	size := encodedSize(&rec)
	if size+codec.FrameHeaderSize > p.opts.MaxBatchBytes {
		return nil, fmt.Errorf("picomq: record of %d bytes exceeds the producer's MaxBatchBytes (%d)", size, p.opts.MaxBatchBytes)
	}
	if p.s.ds() {
		if rec.Key != nil || len(rec.Headers) > 0 {
			return nil, unsupported(ProtocolDurableStreams, "record keys and headers", "a Durable Streams record is a value")
		}
		if ct := p.s.cachedContentType(); ct != "" && wire.IsDSJSONMode(ct) && !json.Valid(rec.Body) {
			return nil, &ClientError{Status: http.StatusBadRequest, Code: "bad_request", Kind: KindBadRequest,
				Message: "record is not valid JSON, but the stream holds application/json"}
		}
	}
	p.mu.Lock()
	for {
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return nil, err
		}
		if p.closed {
			p.mu.Unlock()
			return nil, ErrProducerClosed
		}
		if p.buffered == 0 || p.buffered+size <= p.opts.MaxBufferedBytes {
			break
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		p.mu.Lock()
	}
	if len(p.ackSlab) == 0 {
		p.ackSlab = make([]PendingAck, 256)
	}
	ack := &p.ackSlab[0]
	p.ackSlab = p.ackSlab[1:]
	p.queue.push(pendingRecord{rec: rec, size: size, ack: ack})
	p.queueBytes += size
	p.buffered += size
	p.enqueued++
	if !p.started {
		p.started = true
		go p.run()
	}
	p.mu.Unlock()
	p.kick()
	return ack, nil
}

// SendDurable sends rec without lingering and waits for its
// acknowledgement.
func (p *Producer) SendDurable(ctx context.Context, rec AppendRecord) (Ack, error) {
	a, err := p.Send(ctx, rec)
	if err != nil {
		return Ack{}, err
	}
	p.mu.Lock()
	p.flushUntil = max(p.flushUntil, p.enqueued)
	p.mu.Unlock()
	p.kick()
	return a.Wait(ctx)
}

// Flush sends every record given to Send so far without lingering and
// waits until all are acknowledged. It returns the producer's error if it
// failed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	target := p.enqueued
	p.flushUntil = max(p.flushUntil, target)
	p.mu.Unlock()
	p.kick()
	for {
		p.mu.Lock()
		if p.resolved >= target || p.err != nil {
			err := p.err
			p.mu.Unlock()
			return err
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close flushes and stops the producer. If ctx ends first, the batch in
// flight is abandoned and unacknowledged records fail with
// ErrProducerClosed. Close returns the error that failed the producer, if
// any.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.flushUntil = p.enqueued
	started := p.started
	p.notify()
	p.mu.Unlock()
	if !started {
		p.stop()
		return nil
	}
	p.kick()
	select {
	case <-p.stopped:
	case <-ctx.Done():
		p.stop()
		<-p.stopped
		p.mu.Lock()
		if p.err == nil {
			p.mu.Unlock()
			return ctx.Err()
		}
		p.mu.Unlock()
	}
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	if errors.Is(p.err, ErrProducerClosed) {
		return ctx.Err()
	}
	return p.err
}

// run is the sender: it forms batches and sends them one at a time.
func (p *Producer) run() {
	defer close(p.stopped)
	for {
		p.mu.Lock()
		for p.queue.len == 0 && !p.closed && p.err == nil {
			p.mu.Unlock()
			select {
			case <-p.wake:
			case <-p.ctx.Done():
			}
			p.mu.Lock()
			if p.ctx.Err() != nil {
				break
			}
		}
		if p.ctx.Err() != nil && p.err == nil {
			p.fail(ErrProducerClosed, nil)
		}
		if p.err != nil || p.queue.len == 0 {
			p.mu.Unlock()
			return
		}
		if p.opts.Linger > 0 {
			p.linger()
		}
		batch, bytes := p.batchBuf[:0], codec.FrameHeaderSize
		for p.queue.len > 0 && len(batch) < p.opts.MaxBatchRecords {
			r := p.queue.front()
			if bytes+r.size > p.opts.MaxBatchBytes {
				break
			}
			bytes += r.size
			batch = append(batch, *r)
			p.queue.pop()
		}
		p.batchBuf = batch
		p.queueBytes -= bytes - codec.FrameHeaderSize
		p.taken += uint64(len(batch))
		seq := p.seq
		p.mu.Unlock()

		ack, err := p.deliver(batch, seq)

		p.mu.Lock()
		if err != nil {
			p.fail(err, batch)
			p.mu.Unlock()
			return
		}
		p.seq++
		p.complete(batch, ack)
		clear(batch)
		p.mu.Unlock()
	}
}

// linger waits, with p.mu held, until the queue fills a batch, a flush or
// close is asked for, or Linger passes.
func (p *Producer) linger() {
	t := time.NewTimer(p.opts.Linger)
	defer t.Stop()
	for p.taken >= p.flushUntil && !p.closed &&
		p.queue.len < p.opts.MaxBatchRecords && p.queueBytes+codec.FrameHeaderSize < p.opts.MaxBatchBytes {
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-t.C:
			p.mu.Lock()
			return
		case <-p.ctx.Done():
			p.mu.Lock()
			return
		}
		p.mu.Lock()
	}
}

// complete resolves the acks of a delivered batch; p.mu is held.
func (p *Producer) complete(batch []pendingRecord, ack Ack) {
	c := p.s.c
	first, firstOK := int64(0), false
	if ack.Start != "" {
		if n, err := c.OffsetOf(ack.Start); err == nil {
			first, firstOK = n, true
		}
	}
	perRecord := firstOK && ack.Count == len(batch)
	a := Ack{Count: 1, Timestamp: ack.Timestamp, Duplicate: ack.Duplicate}
	var pc *client
	if perRecord {
		pc = c
	} else {
		a.Start, a.Next = ack.Start, ack.Next
	}
	for i := range batch {
		r := &batch[i]
		r.ack.resolve(a, pc, first+int64(i), nil)
		p.buffered -= r.size
	}
	p.resolved += uint64(len(batch))
	p.notify()
}

// fail poisons the producer with err and fails batch and every queued
// record; p.mu is held.
func (p *Producer) fail(err error, batch []pendingRecord) {
	if !errors.Is(err, ErrProducerClosed) {
		err = fmt.Errorf("picomq: producer %s epoch %d failed: %w", p.opts.ID, p.opts.Epoch, err)
	}
	p.err = err
	failOne := func(r *pendingRecord) {
		r.ack.resolve(Ack{}, nil, 0, err)
		p.buffered -= r.size
		p.resolved++
	}
	for i := range batch {
		failOne(&batch[i])
	}
	for p.queue.len > 0 {
		failOne(p.queue.front())
		p.queue.pop()
	}
	p.queueBytes = 0
	p.notify()
}

// deliver sends one batch until it is acknowledged, retrying what may be
// retried under the same sequence number.
func (p *Producer) deliver(batch []pendingRecord, seq uint64) (Ack, error) {
	deadline := time.Now().Add(p.opts.DeliveryTimeout)
	hdr := &producerHeaders{id: p.opts.ID, epoch: p.opts.Epoch, seq: seq}
	recs := make([]AppendRecord, len(batch))
	for i := range batch {
		recs[i] = batch[i].rec
	}
	var body []byte
	var ct string
	count := len(recs)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithDeadline(p.ctx, deadline)
		var ack Ack
		var err error
		if body == nil {
			body, ct, count, err = p.encode(ctx, recs)
		}
		if err == nil {
			if p.s.ds() {
				ack, err = p.s.dsAppendBody(ctx, ct, body, count, hdr)
			} else {
				ack, err = p.s.picoAppendBody(ctx, body, count, hdr)
			}
		}
		cancel()
		if err == nil {
			if ack.Duplicate && attempt == 1 {
				// Nothing of ours was sent with this sequence before:
				// another producer wrote it with the same ID and epoch.
				return Ack{}, fmt.Errorf("batch %d was already written by another producer with the same ID and epoch; use a higher Epoch or a new ID", seq)
			}
			return ack, nil
		}
		if p.ctx.Err() != nil {
			return Ack{}, ErrProducerClosed
		}
		if !retryableProduce(err) {
			return Ack{}, err
		}
		wait := p.s.c.retry.delay(attempt, retryAfterOf(err))
		if time.Now().Add(wait).After(deadline) {
			return Ack{}, fmt.Errorf("gave up after %d attempts (DeliveryTimeout %v): %w", attempt, p.opts.DeliveryTimeout, err)
		}
		if sleepCtx(p.ctx, wait) != nil {
			return Ack{}, ErrProducerClosed
		}
	}
}

// retryableProduce: errors after which a batch's outcome is unknown or it
// was refused for now, so sending it again under the same sequence is safe
// and may succeed.
func retryableProduce(err error) bool {
	var ce *ClientError
	if errors.As(err, &ce) {
		return ce.Status == http.StatusTooManyRequests || ce.Status >= 500
	}
	var ue *UnsupportedError
	if errors.As(err, &ue) || errors.Is(err, errRedirect) || errors.Is(err, errPermanent) {
		return false
	}
	return true // network errors, timeouts of one attempt
}

// encode renders a batch body for the stream's protocol.
func (p *Producer) encode(ctx context.Context, recs []AppendRecord) (body []byte, ct string, count int, err error) {
	if !p.s.ds() {
		n := codec.FrameHeaderSize
		for i := range recs {
			n += encodedSize(&recs[i])
		}
		return encodeBatch(make([]byte, 0, n), recs), "", len(recs), nil
	}
	if ct, err = p.s.knownContentType(ctx); err != nil {
		return nil, "", 0, err
	}
	jsonMode := wire.IsDSJSONMode(ct)
	if body, err = dsBody(recs, jsonMode); err != nil {
		return nil, "", 0, err
	}
	count = len(recs)
	if !jsonMode {
		count = 1
	}
	return body, ct, count, nil
}

// recordQueue is a FIFO of records in fixed-size chunks, so that a long
// queue (up to MaxBufferedBytes of small records) is never copied to grow
// or shrink: push and pop are O(1) and chunks are recycled.
type recordQueue struct {
	chunks [][]pendingRecord // every chunk but the last is full
	head   int               // records of chunks[0] already popped
	len    int
	free   [][]pendingRecord
}

const queueChunk = 512

func (q *recordQueue) push(r pendingRecord) {
	n := len(q.chunks)
	if n == 0 || len(q.chunks[n-1]) == queueChunk {
		var c []pendingRecord
		if k := len(q.free); k > 0 {
			c, q.free = q.free[k-1], q.free[:k-1]
		} else {
			c = make([]pendingRecord, 0, queueChunk)
		}
		q.chunks = append(q.chunks, c)
		n++
	}
	q.chunks[n-1] = append(q.chunks[n-1], r)
	q.len++
}

// front returns the oldest record; the queue must not be empty.
func (q *recordQueue) front() *pendingRecord { return &q.chunks[0][q.head] }

// pop drops the oldest record.
func (q *recordQueue) pop() {
	c := q.chunks[0]
	c[q.head] = pendingRecord{}
	q.head++
	q.len--
	if q.head < len(c) {
		return
	}
	// Chunk used up. A partly filled last chunk stays: pushes go on
	// filling it.
	if len(c) < queueChunk && len(q.chunks) == 1 {
		if q.len == 0 {
			q.chunks[0], q.head = c[:0], 0
		}
		return
	}
	if len(q.free) < 8 {
		q.free = append(q.free, c[:0])
	}
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
	q.head = 0
}
