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
	// MaxInFlight is how many batches may be sent and not yet acknowledged
	// at once (default 4; 1 sends one batch at a time). Batches carry
	// consecutive sequence numbers, so the server writes them in sequence
	// order whatever order they arrive in (one that arrives early is
	// refused with a sequence gap and sent again once its predecessors are
	// acknowledged), and acknowledgements complete in Send order.
	MaxInFlight int
}

const (
	defaultMaxBatchBytes    = 1 << 20
	defaultMaxBatchRecords  = 10000
	defaultMaxBufferedBytes = 32 << 20
	defaultDeliveryTimeout  = 2 * time.Minute
	defaultMaxInFlight      = 4
)

// ErrProducerClosed is returned by Send after Close, and completes the acks
// of records that Close abandoned.
var ErrProducerClosed = errors.New("picomq: producer closed")

// Producer appends records to one stream in batches, with the
// idempotent-producer headers (Pico-Producer-Id/-Epoch/-Seq, or the Durable
// Streams Producer-* headers): every batch gets the next sequence number, and
// a batch whose outcome is unknown (connection lost, 5xx, 429) is sent
// again with the same sequence number, which the server acknowledges
// without writing it twice. Up to MaxInFlight batches are in flight at
// once (pipelining); the sequence numbers keep records appended in Send
// order, and acks complete in that order.
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
	// sendCtx is ctx, also ended when the producer fails: the batches
	// still in flight then stop retrying.
	sendCtx  context.Context
	stopSend context.CancelFunc

	mu         sync.Mutex
	queue      recordQueue // not yet in a batch
	queueBytes int
	window     []*flight // batches sent and not yet settled, in sequence order
	free       [][]pendingRecord
	ackSlab    []PendingAck // acks are allocated in slabs
	buffered   int          // bytes queued or in flight
	enqueued   uint64       // records accepted by Send, ever
	taken      uint64       // records put into batches, ever
	resolved   uint64       // records whose ack is complete, ever
	flushUntil uint64       // send without lingering until taken reaches it
	seq        uint64       // of the next batch formed
	senders    int          // send goroutines running
	err        error        // the failure that poisoned the producer
	closed     bool
	started    bool
	wake       chan struct{}
	changed    chan struct{} // closed (and replaced) on progress
	stopped    chan struct{}
}

// flight is one batch being delivered by its own goroutine.
type flight struct {
	seq   uint64
	batch []pendingRecord
	done  bool // delivered or failed; settled in sequence order
	ack   Ack
	err   error
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
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = defaultMaxInFlight
	}
	ctx, cancel := context.WithCancel(context.Background())
	sendCtx, stopSend := context.WithCancel(ctx)
	return &Producer{
		s: s, opts: opts, ctx: ctx, stop: cancel, sendCtx: sendCtx, stopSend: stopSend,
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

// run forms batches and starts a sender for each, up to MaxInFlight at a
// time; it returns once the producer is closed and everything settled, or
// failed.
func (p *Producer) run() {
	defer close(p.stopped)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for p.err == nil && p.ctx.Err() == nil && !p.canForm() && !(p.closed && p.queue.len == 0) {
			p.mu.Unlock()
			select {
			case <-p.wake:
			case <-p.ctx.Done():
			}
			p.mu.Lock()
		}
		if p.ctx.Err() != nil && p.err == nil {
			p.fail(ErrProducerClosed, nil)
		}
		if p.err != nil || p.queue.len == 0 {
			// Failed, or closed with nothing left to form: wait for the
			// senders, so that no request outlives Close.
			for len(p.window) > 0 && p.err == nil {
				ch := p.changed
				p.mu.Unlock()
				<-ch
				p.mu.Lock()
			}
			for p.senders > 0 {
				ch := p.changed
				p.mu.Unlock()
				<-ch
				p.mu.Lock()
			}
			return
		}
		if p.opts.Linger > 0 {
			p.linger()
		}
		var batch []pendingRecord
		if k := len(p.free); k > 0 {
			batch, p.free = p.free[k-1], p.free[:k-1]
		}
		bytes := codec.FrameHeaderSize
		for p.queue.len > 0 && len(batch) < p.opts.MaxBatchRecords {
			r := p.queue.front()
			if bytes+r.size > p.opts.MaxBatchBytes {
				break
			}
			bytes += r.size
			batch = append(batch, *r)
			p.queue.pop()
		}
		p.queueBytes -= bytes - codec.FrameHeaderSize
		p.taken += uint64(len(batch))
		f := &flight{seq: p.seq, batch: batch}
		p.seq++
		p.window = append(p.window, f)
		p.senders++
		go p.send(f)
	}
}

// canForm reports whether run should form the next batch now: when
// nothing is in flight, as soon as a record is queued (batches grow with
// load); beside batches in flight, only a full batch, or one a flush,
// SendDurable or Close is waiting for. So pipelining adds throughput
// without cutting a steady stream of records into many small batches.
// p.mu is held.
func (p *Producer) canForm() bool {
	if p.queue.len == 0 || len(p.window) >= p.opts.MaxInFlight {
		return false
	}
	return len(p.window) == 0 || p.closed || p.taken < p.flushUntil ||
		p.queue.len >= p.opts.MaxBatchRecords || p.queueBytes+codec.FrameHeaderSize >= p.opts.MaxBatchBytes
}

// send delivers one batch and settles it.
func (p *Producer) send(f *flight) {
	ack, err := p.deliver(f)
	p.mu.Lock()
	f.done, f.ack, f.err = true, ack, err
	p.settle()
	p.senders--
	p.notify()
	p.mu.Unlock()
	p.kick()
}

// settle completes the delivered batches at the head of the window, in
// sequence order; the first failed one fails the producer (fail) and with
// it every later batch, delivered or not. p.mu is held.
func (p *Producer) settle() {
	for len(p.window) > 0 && p.window[0].done && p.err == nil {
		f := p.window[0]
		p.window[0] = nil
		p.window = p.window[1:]
		if f.err != nil {
			p.fail(f.err, f.batch)
			break
		}
		p.complete(f.batch, f.ack)
		clear(f.batch)
		if len(p.free) < p.opts.MaxInFlight {
			p.free = append(p.free, f.batch[:0])
		}
	}
}

// predecessorsPending reports whether a batch before f is still unsettled;
// p.mu is held.
func (p *Producer) predecessorsPending(f *flight) bool {
	return p.err == nil && len(p.window) > 0 && p.window[0] != f
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
	p.stopSend()
	p.failBatch(batch)
	for _, f := range p.window {
		p.failBatch(f.batch)
	}
	clear(p.window)
	p.window = p.window[:0]
	for p.queue.len > 0 {
		p.failRecord(p.queue.front())
		p.queue.pop()
	}
	p.queueBytes = 0
	p.notify()
}

// failBatch fails the records of a batch with the producer's error; p.mu
// is held.
func (p *Producer) failBatch(batch []pendingRecord) {
	for i := range batch {
		p.failRecord(&batch[i])
	}
}

func (p *Producer) failRecord(r *pendingRecord) {
	r.ack.resolve(Ack{}, nil, 0, p.err)
	p.buffered -= r.size
	p.resolved++
}

// deliver sends one batch until it is acknowledged, retrying what may be
// retried under the same sequence number. A sequence gap for an attempt
// sent while an earlier batch was unsettled means this one overtook it on
// another connection: it was not written, and is sent again once the
// earlier ones are settled. A gap for an attempt sent after them is real.
func (p *Producer) deliver(f *flight) (Ack, error) {
	batch, seq := f.batch, f.seq
	deadline := time.Now().Add(p.opts.DeliveryTimeout)
	hdr := &producerHeaders{id: p.opts.ID, epoch: p.opts.Epoch, seq: seq}
	maybeWritten := false // an earlier attempt may have been written
	recs := make([]AppendRecord, len(batch))
	for i := range batch {
		recs[i] = batch[i].rec
	}
	var body []byte
	var ct string
	count := len(recs)
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithDeadline(p.sendCtx, deadline)
		p.mu.Lock()
		overtaking := p.predecessorsPending(f) // a gap answer then says nothing
		p.mu.Unlock()
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
			if ack.Duplicate && !maybeWritten {
				// Nothing of ours was sent with this sequence before:
				// another producer wrote it with the same ID and epoch.
				return Ack{}, fmt.Errorf("batch %d was already written by another producer with the same ID and epoch; use a higher Epoch or a new ID", seq)
			}
			return ack, nil
		}
		if p.sendCtx.Err() != nil {
			return Ack{}, p.stoppedErr()
		}
		if ErrorKind(err) == KindSequenceGap && overtaking {
			p.awaitPredecessors(f)
			if p.sendCtx.Err() != nil {
				return Ack{}, p.stoppedErr() // an earlier batch failed, or Close gave up
			}
			continue
		}
		if !retryableProduce(err) {
			return Ack{}, err
		}
		maybeWritten = true
		wait := p.s.c.retry.delay(attempt, retryAfterOf(err))
		if time.Now().Add(wait).After(deadline) {
			return Ack{}, fmt.Errorf("gave up after %d attempts (DeliveryTimeout %v): %w", attempt, p.opts.DeliveryTimeout, err)
		}
		if sleepCtx(p.sendCtx, wait) != nil {
			return Ack{}, p.stoppedErr()
		}
	}
}

// stoppedErr is why sendCtx ended: the producer's failure, or Close.
func (p *Producer) stoppedErr() error {
	if err := p.Err(); err != nil {
		return err
	}
	return ErrProducerClosed
}

// awaitPredecessors waits until every batch before f is settled (or the
// producer failed or closed).
func (p *Producer) awaitPredecessors(f *flight) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.predecessorsPending(f) && p.sendCtx.Err() == nil {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.sendCtx.Done():
		}
		p.mu.Lock()
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
