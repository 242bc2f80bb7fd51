package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/hdr"
)

// The bare replication floor (issue 32): three bare processes on the
// matrix's disk — an owner and two followers, `benchmatrix replfloor`
// children — doing only what a replicated append must: the owner reads a
// 100-byte append from a loopback TCP connection, pwrites it (with an
// 8-byte length and CRC-32C header) to a preallocated file, fdatasyncs
// and answers. For a replicated append it also sends the record to both
// followers, which pwrite it and either fdatasync (`fsync` mode) or not
// (`write` mode) before answering, and answers its client after its own
// fdatasync and the first follower's answer. The same owner serves
// `local` appends (no followers), so local and replicated run on the same
// processes, alternating.
//
// The bare live-tail floor (issue 31) is one more such process, an owner
// without followers (`-owner`): besides its local clients it has
// subscribers, and after each fdatasync its committer sends the records
// that fdatasync made durable to every subscriber connection — after
// durability, never before, as a node may only deliver what it has
// acknowledged or could acknowledge.
//
// Group commit everywhere: the owner's committer takes every append
// waiting, writes them with one pwrite and sends them to the followers
// as one message, while one fdatasync covers every group written while
// the one before ran; a follower writes every message it has received
// with one pwrite, and one fdatasync covers every write made while the
// one before ran.
//
// The protocol is length-prefixed binary on both sides (clients and
// followers), not HTTP: the floor is the least any implementation must
// do, and framing an append in HTTP/1.1 is work PicoMQ chose. A
// connection's first byte says what it is:
//
//	'L', 'F', 'W'  a client of the owner: local, replicated to fsync
//	               followers, replicated to write followers. Then
//	               requests [uint32 length][record], each answered by
//	               [uint64 file offset].
//	'f', 'w'       the owner, at a follower (fsync, write). Then
//	               messages [uint32 length][uint64 sequence][entries],
//	               answered by [uint64 sequence] of the last one written.
//	'S'            a subscriber of the owner's local ('L') log. It sends
//	               nothing more; it receives an empty frame ([uint32 0])
//	               once it is one, then every local record made durable
//	               from then on, in log order, each framed
//	               [uint32 length][record] as a client sent it.
//	'T'            a local client and subscriber on one connection (as
//	               a NATS client publishes and consumes on one): its
//	               requests are an 'L' client's, its answers are
//	               [uint32 0xFFFFFFFF][uint64 file offset], and it
//	               receives an 'S' subscriber's frames between them.
//
// Integers are big-endian.

// replFloorFileBytes is the size of each preallocated (written with
// zeros and synced before use) log file; appends wrap around in it.
const replFloorFileBytes = 8 << 20

// replFloorMaxRecord bounds a client record and a follower message.
const replFloorMaxRecord = 1 << 20

// replFloorMain is `benchmatrix replfloor -dir D [-followers A,B]`.
func replFloorMain(args []string) error {
	fs := flag.NewFlagSet("replfloor", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the preallocated log files (the disk under test)")
	followers := fs.String("followers", "", "comma-separated follower addresses (the owner; empty for a follower)")
	owner := fs.Bool("owner", false, "an owner without followers: local clients ('L') and subscribers ('S') only (the live-tail floor)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &floorServer{dir: *dir, logs: map[byte]*floorLog{}}
	if *owner {
		if *followers != "" {
			return errors.New("-owner and -followers: an owner without followers has none")
		}
		l, err := s.openLog("owner-L.log", nil)
		if err != nil {
			return err
		}
		s.logs['L'] = l
	} else if *followers != "" {
		addrs := strings.Split(*followers, ",")
		for _, mode := range []byte{'L', 'F', 'W'} {
			var fl []net.Conn
			if mode != 'L' {
				for _, a := range addrs {
					c, err := net.DialTimeout("tcp", a, 10*time.Second)
					if err != nil {
						return err
					}
					if _, err := c.Write([]byte{mode + 'a' - 'A'}); err != nil {
						return err
					}
					fl = append(fl, c)
				}
			}
			l, err := s.openLog(fmt.Sprintf("owner-%c.log", mode), fl)
			if err != nil {
				return err
			}
			s.logs[mode] = l
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	announce(ln.Addr().String())
	return s.accept(ln)
}

// accept serves ln's connections until it fails.
func (s *floorServer) accept(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := s.serve(c); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "replfloor: %v\n", err)
			}
		}()
	}
}

// floorServer is a replfloor process: an owner (logs by client mode) or
// a follower (a log per owner connection).
type floorServer struct {
	dir   string
	logs  map[byte]*floorLog
	files atomic.Int64
	// datasync makes an owner's log file durable: unix.Fdatasync, or a
	// test's wrapper of it (nil: unix.Fdatasync).
	datasync func(*os.File) error
}

// serve runs one connection.
func (s *floorServer) serve(c net.Conn) error {
	r := bufio.NewReaderSize(c, 64<<10)
	mode, err := r.ReadByte()
	if err != nil {
		return err
	}
	switch mode {
	case 'L', 'F', 'W':
		l := s.logs[mode]
		if l == nil {
			return fmt.Errorf("client mode %q at a follower", mode)
		}
		return l.serveClient(r, c, false)
	case 'S':
		l := s.logs['L']
		if l == nil {
			return errors.New("a subscriber at a follower")
		}
		return l.serveSubscriber(r, c)
	case 'T':
		l := s.logs['L']
		if l == nil {
			return errors.New("a subscriber at a follower")
		}
		l.addSubscriber(c)
		defer l.dropSubscriber(c)
		return l.serveClient(r, c, true)
	case 'f', 'w':
		f, err := s.preallocate(fmt.Sprintf("follower-%c-%d-%d.log", mode, os.Getpid(), s.files.Add(1)))
		if err != nil {
			return err
		}
		defer f.Close()
		return follow(r, c, f, mode == 'f')
	}
	return fmt.Errorf("unknown connection kind %q", mode)
}

// preallocate creates a log file of replFloorFileBytes zeros, synced, so
// that an fdatasync of an append flushes data, not block allocation.
func (s *floorServer) preallocate(name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < replFloorFileBytes; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros, off); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// floorLog is one of the owner's logs with its committer.
type floorLog struct {
	f         *os.File
	in        chan floorAppend
	followers []net.Conn
	acked     atomic.Uint64 // highest sequence a follower has answered
	ackSignal chan struct{} // a follower answered (capacity 1)
	followErr atomic.Pointer[error]
	datasync  func(*os.File) error

	subMu sync.Mutex
	subs  []net.Conn // subscribers, sent each durable group by sync
}

// floorAppend is a client's record waiting for the committer, which
// sends its offset (or -1 on failure) on done.
type floorAppend struct {
	rec  []byte
	done chan int64
}

func (s *floorServer) openLog(name string, followers []net.Conn) (*floorLog, error) {
	f, err := s.preallocate(name)
	if err != nil {
		return nil, err
	}
	l := &floorLog{f: f, in: make(chan floorAppend, 1024), followers: followers, ackSignal: make(chan struct{}, 1), datasync: s.datasync}
	if l.datasync == nil {
		l.datasync = func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
	}
	for _, c := range followers {
		go l.readAcks(c)
	}
	go l.commit()
	return l, nil
}

// serveClient answers one client's appends in turn; tagged, each answer
// is marked as one (tailAnswer) for a connection that also subscribes.
func (l *floorLog) serveClient(r *bufio.Reader, w io.Writer, tagged bool) error {
	done := make(chan int64, 1)
	var hdr [12]byte
	for {
		if _, err := io.ReadFull(r, hdr[:4]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n > replFloorMaxRecord {
			return fmt.Errorf("record of %d bytes", n)
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(r, rec); err != nil {
			return err
		}
		l.in <- floorAppend{rec: rec, done: done}
		off := <-done
		if off < 0 {
			return errors.New("append failed")
		}
		ans := hdr[:8]
		if tagged {
			ans = binary.BigEndian.AppendUint32(hdr[:0], tailAnswer)
			ans = ans[:12]
		}
		binary.BigEndian.PutUint64(ans[len(ans)-8:], uint64(off))
		if _, err := w.Write(ans); err != nil {
			return err
		}
	}
}

// serveSubscriber adds c to the log's subscribers until it closes (a
// subscriber sends nothing after its first byte) or sync drops it.
func (l *floorLog) serveSubscriber(r *bufio.Reader, c net.Conn) error {
	// The empty frame tells the subscriber that records appended from
	// now on will reach it: written under subMu, so that no record's
	// frame comes before it.
	l.subMu.Lock()
	l.subs = append(l.subs, c)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write([]byte{0, 0, 0, 0})
	l.subMu.Unlock()
	defer l.dropSubscriber(c)
	if err != nil {
		return err
	}
	if _, err := r.ReadByte(); err != nil {
		return err
	}
	return errors.New("a subscriber sent data")
}

// addSubscriber makes c a subscriber: every group made durable from now
// on is sent to it.
func (l *floorLog) addSubscriber(c net.Conn) {
	l.subMu.Lock()
	l.subs = append(l.subs, c)
	l.subMu.Unlock()
}

// dropSubscriber removes c from the subscribers and closes it.
func (l *floorLog) dropSubscriber(c net.Conn) {
	l.subMu.Lock()
	l.subs = slices.DeleteFunc(l.subs, func(s net.Conn) bool { return s == c })
	l.subMu.Unlock()
	_ = c.Close()
}

// publish sends frames (durable records, each [uint32 length][record])
// to every subscriber; one that cannot take them within 10 s is dropped.
func (l *floorLog) publish(frames []byte) {
	l.subMu.Lock()
	subs := slices.Clone(l.subs)
	l.subMu.Unlock()
	for _, c := range subs {
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(frames); err != nil {
			l.dropSubscriber(c)
		}
	}
}

// floorGroup is a group of appends written and sent, waiting for the
// fdatasync (and follower answer) that lets the owner answer them.
type floorGroup struct {
	batch []floorAppend
	start int64  // file offset of the first
	seq   uint64 // the followers' message sequence
	ok    bool   // written and sent without error
}

// commit is the group committer's writing half: every append waiting
// goes into one pwrite and one message to each follower, and the group
// goes to sync, which covers every group written while its last
// fdatasync ran with one fdatasync: writes overlap the disk's flush, as
// a WAL's should.
func (l *floorLog) commit() {
	groups := make(chan floorGroup, 1024)
	go l.sync(groups)
	var (
		buf []byte
		off int64
		seq uint64
	)
	for a := range l.in {
		batch := []floorAppend{a}
	more:
		for len(batch) < 4096 {
			select {
			case a := <-l.in:
				batch = append(batch, a)
			default:
				break more
			}
		}
		// The followers' message: the entries after a 12-byte header.
		buf = append(buf[:0], make([]byte, 12)...)
		for _, a := range batch {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(a.rec)))
			buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(a.rec, castagnoli))
			buf = append(buf, a.rec...)
		}
		entries := buf[12:]
		seq++
		binary.BigEndian.PutUint32(buf[:4], uint32(8+len(entries)))
		binary.BigEndian.PutUint64(buf[4:12], seq)
		g := floorGroup{batch: batch, seq: seq, ok: true}
		for _, c := range l.followers {
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write(buf); err != nil {
				g.ok = false
			}
		}
		if off+int64(len(entries)) > replFloorFileBytes {
			off = 0
		}
		g.start = off
		if _, err := l.f.WriteAt(entries, off); err != nil {
			g.ok = false
		}
		off += int64(len(entries))
		groups <- g
	}
}

// sync is the committer's answering half: one fdatasync for every group
// written so far, then (replicated) the first follower's answer to the
// last of them, then the records to the subscribers, then the answers.
func (l *floorLog) sync(groups <-chan floorGroup) {
	var (
		ready  []floorGroup
		frames []byte
	)
	for g := range groups {
		ready = append(ready[:0], g)
	more:
		for {
			select {
			case g := <-groups:
				ready = append(ready, g)
			default:
				break more
			}
		}
		ok := l.datasync(l.f) == nil
		last := ready[len(ready)-1].seq
		if len(l.followers) > 0 {
			for ok && l.acked.Load() < last {
				if l.followErr.Load() != nil {
					ok = false
					break
				}
				<-l.ackSignal
			}
		}
		if ok {
			frames = frames[:0]
			for _, g := range ready {
				for _, a := range g.batch {
					if g.ok {
						frames = binary.BigEndian.AppendUint32(frames, uint32(len(a.rec)))
						frames = append(frames, a.rec...)
					}
				}
			}
			if len(frames) > 0 {
				l.publish(frames)
			}
		}
		for _, g := range ready {
			at := g.start
			for _, a := range g.batch {
				if ok && g.ok {
					a.done <- at
				} else {
					a.done <- -1
				}
				at += int64(8 + len(a.rec))
			}
		}
	}
}

// readAcks reads one follower's answers and raises l.acked.
func (l *floorLog) readAcks(c net.Conn) {
	r := bufio.NewReader(c)
	var b [8]byte
	for {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			l.followErr.Store(&err)
			select {
			case l.ackSignal <- struct{}{}:
			default:
			}
			return
		}
		s := binary.BigEndian.Uint64(b[:])
		for {
			cur := l.acked.Load()
			if s <= cur || l.acked.CompareAndSwap(cur, s) {
				break
			}
		}
		select {
		case l.ackSignal <- struct{}{}:
		default:
		}
	}
}

// follow is a follower's side of one owner connection: every message
// received is written (and with sync, fdatasynced) before its sequence
// is answered. Messages already received are written together, and with
// sync, one fdatasync covers every message written while the last one
// ran (followerSync), so writes overlap the flush.
func follow(r *bufio.Reader, w io.Writer, f *os.File, sync bool) error {
	written := make(chan uint64, 1024)
	synced := make(chan error, 1)
	go func() { synced <- followerSync(written, w, f, sync) }()
	err := followWrite(r, f, written)
	close(written)
	if serr := <-synced; serr != nil {
		return serr
	}
	return err
}

// followWrite reads the owner's messages and writes their entries,
// sending the sequence of the last message of each write on written.
func followWrite(r *bufio.Reader, f *os.File, written chan<- uint64) error {
	var (
		buf  []byte
		off  int64
		hdr  [12]byte
		last uint64
	)
	for {
		buf = buf[:0]
		// One message at least; then every whole one already buffered.
		for len(buf) == 0 || r.Buffered() >= 12 {
			if len(buf) > 0 {
				p, _ := r.Peek(4)
				if r.Buffered() < 4+int(binary.BigEndian.Uint32(p)) {
					break
				}
			}
			if _, err := io.ReadFull(r, hdr[:]); err != nil {
				return err
			}
			n := binary.BigEndian.Uint32(hdr[:4])
			if n < 8 || n > replFloorMaxRecord+8 {
				return fmt.Errorf("message of %d bytes", n)
			}
			last = binary.BigEndian.Uint64(hdr[4:])
			k := len(buf)
			buf = slices.Grow(buf, int(n-8))[:k+int(n-8)]
			if _, err := io.ReadFull(r, buf[k:]); err != nil {
				return err
			}
		}
		if off+int64(len(buf)) > replFloorFileBytes {
			off = 0
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			return err
		}
		off += int64(len(buf))
		written <- last
	}
}

// followerSync answers the sequences written: after an fdatasync with
// sync, each write's sequence at once without.
func followerSync(written <-chan uint64, w io.Writer, f *os.File, sync bool) error {
	var ack [8]byte
	for last := range written {
		if sync {
		more:
			for {
				select {
				case s, ok := <-written:
					if !ok {
						break more
					}
					last = s
				default:
					break more
				}
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
		}
		binary.BigEndian.PutUint64(ack[:], last)
		if _, err := w.Write(ack[:]); err != nil {
			return err
		}
	}
	return nil
}

// replFloorCluster is the three replfloor processes.
type replFloorCluster struct {
	procs []*proc
	owner string
}

// startReplFloor starts two followers and an owner with their files in
// dir.
func startReplFloor(dir string) (*replFloorCluster, error) {
	c := &replFloorCluster{}
	var addrs []string
	for i := range 2 {
		p, a, err := startChild(fmt.Sprintf("replfloor-follower-%d", i), "replfloor", "-dir", dir)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		addrs = append(addrs, a)
	}
	p, a, err := startChild("replfloor-owner", "replfloor", "-dir", dir, "-followers", strings.Join(addrs, ","))
	if err != nil {
		c.stop()
		return nil, err
	}
	c.procs, c.owner = append(c.procs, p), a
	return c, nil
}

func (c *replFloorCluster) stop() {
	for _, p := range c.procs {
		p.stop()
	}
}

// floorLoad is one or more measured points of the replication floor.
type floorLoad struct {
	appends int64           // answered in the measured windows
	seconds float64         // the windows' total length
	lats    []time.Duration // of those appends
}

// add is both loads' appends over both windows.
func (f floorLoad) add(g floorLoad) floorLoad {
	return floorLoad{appends: f.appends + g.appends, seconds: f.seconds + g.seconds, lats: append(f.lats, g.lats...)}
}

// perSec is appends answered per second of the windows.
func (f floorLoad) perSec() float64 { return float64(f.appends) / f.seconds }

// p50 is the median latency in ms.
func (f floorLoad) p50() float64 {
	l := slices.Clone(f.lats)
	slices.Sort(l)
	return float64(l[len(l)/2].Microseconds()) / 1000
}

// load runs clients closed-loop clients of mode ('L', 'F', 'W') against
// the owner, each sending size-byte records, for warmup and then d, and
// returns the appends sent and answered in d with their latencies. A
// window without one (an fdatasync can stall longer than a short window
// when the disk is shared) is tried again with twice the window, up to
// three times.
func (c *replFloorCluster) load(ctx context.Context, mode byte, clients, size int, warmup, d time.Duration) (floorLoad, error) {
	for try := 0; ; try++ {
		f, err := c.loadOnce(ctx, mode, clients, size, warmup, d)
		if err == nil && f.appends == 0 {
			err = fmt.Errorf("mode %c, %d clients: no append answered in %v", mode, clients, d)
			if try < 3 {
				d *= 2
				continue
			}
		}
		return f, err
	}
}

func (c *replFloorCluster) loadOnce(ctx context.Context, mode byte, clients, size int, warmup, d time.Duration) (floorLoad, error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lats    []time.Duration
		done    atomic.Int64
		firstEr error
	)
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+d)
	for range clients {
		wg.Go(func() {
			var mine []time.Duration
			err := floorClient(ctx, c.owner, mode, size, until, func(sent time.Time, took time.Duration) {
				if !sent.Before(from) && sent.Add(took).Before(until) {
					mine = append(mine, took)
				}
			})
			mu.Lock()
			defer mu.Unlock()
			lats = append(lats, mine...)
			done.Add(int64(len(mine)))
			if err != nil && firstEr == nil {
				firstEr = err
			}
		})
	}
	wg.Wait()
	if firstEr != nil {
		return floorLoad{}, firstEr
	}
	return floorLoad{appends: done.Load(), seconds: d.Seconds(), lats: lats}, nil
}

// floorClient appends size-byte records over one connection until
// until, calling each with the send time and the round trip.
func floorClient(ctx context.Context, addr string, mode byte, size int, until time.Time, each func(sent time.Time, took time.Duration)) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(until.Add(30 * time.Second))
	req := make([]byte, 1+4+size)
	req[0] = mode
	binary.BigEndian.PutUint32(req[1:5], uint32(size))
	first := true
	var ans [8]byte
	for time.Now().Before(until) && ctx.Err() == nil {
		b := req[1:]
		if first {
			b, first = req, false
		}
		t := time.Now()
		if _, err := conn.Write(b); err != nil {
			return err
		}
		if _, err := io.ReadFull(conn, ans[:]); err != nil {
			return fmt.Errorf("append answer: %w", err)
		}
		each(t, time.Since(t))
	}
	return nil
}

// startTailFloor starts the live-tail floor's process: an owner without
// followers (local clients and subscribers), its file in dir.
func startTailFloor(dir string) (*proc, string, error) {
	return startChild("tailfloor", "replfloor", "-dir", dir, "-owner")
}

// tailAnswer is the length word that marks an append's answer on a 'T'
// connection (where records come too): no record is that long.
const tailAnswer = 0xFFFFFFFF

// readTailFrame reads one frame from a subscriber's connection into
// buf's space: a record ([uint32 length][record]), or, on a 'T'
// connection, an append's answer ([uint32 tailAnswer][uint64 offset]),
// returned as answer >= 0 with a nil record.
func readTailFrame(r *bufio.Reader, buf []byte) (rec []byte, answer int64, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return nil, -1, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == tailAnswer {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, -1, fmt.Errorf("append answer: %w", err)
		}
		off := int64(binary.BigEndian.Uint64(hdr[:]))
		if off < 0 {
			return nil, -1, fmt.Errorf("append answer: offset %d", off)
		}
		return nil, off, nil
	}
	if n > replFloorMaxRecord {
		return nil, -1, fmt.Errorf("subscriber frame of %d bytes", n)
	}
	rec = slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(r, rec); err != nil {
		return nil, -1, fmt.Errorf("subscriber frame: %w", err)
	}
	return rec, -1, nil
}

// tailConn is a bare live tail on the floor's owner: an appender's
// connection ('L') and a subscriber's ('S'), or one connection for both
// ('T'; app and sub are then the same).
type tailConn struct {
	app, sub net.Conn
	appR     *bufio.Reader // the 'L' connection's answers
	subR     *bufio.Reader
	req      []byte
}

// dialTail opens the connections (one with oneConn); every read and
// write on them must end by deadline.
func dialTail(ctx context.Context, addr string, oneConn bool, deadline time.Time) (*tailConn, error) {
	var d net.Dialer
	sub, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = sub.SetDeadline(deadline)
	t := &tailConn{app: sub, sub: sub, subR: bufio.NewReaderSize(sub, 64<<10), req: []byte{'T'}}
	if !oneConn {
		if _, err := sub.Write([]byte{'S'}); err != nil {
			sub.Close()
			return nil, err
		}
		// Records appended once the owner has sent the empty frame reach
		// the subscriber (on a 'T' connection they do from its first
		// request on: the owner subscribes it before reading that).
		if rec, ans, err := readTailFrame(t.subR, nil); err != nil || ans >= 0 || len(rec) > 0 {
			sub.Close()
			return nil, fmt.Errorf("subscribing: a %d-byte record or answer %d (%v), want the empty frame", len(rec), ans, err)
		}
		if t.app, err = d.DialContext(ctx, "tcp", addr); err != nil {
			sub.Close()
			return nil, err
		}
		_ = t.app.SetDeadline(deadline)
		t.appR, t.req = bufio.NewReader(t.app), []byte{'L'}
	}
	return t, nil
}

func (t *tailConn) close() {
	t.app.Close()
	t.sub.Close()
}

// send writes one append (the first carries the connection's kind).
func (t *tailConn) send(rec []byte) error {
	t.req = binary.BigEndian.AppendUint32(t.req, uint32(len(rec)))
	t.req = append(t.req, rec...)
	_, err := t.app.Write(t.req)
	t.req = t.req[:0]
	return err
}

// answer reads one append's answer, its file offset, from the 'L'
// connection (on a 'T' connection answers come with the records).
func (t *tailConn) answer() (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(t.appR, b[:]); err != nil {
		return 0, fmt.Errorf("append answer: %w", err)
	}
	return int64(binary.BigEndian.Uint64(b[:])), nil
}

// tailFloorLoad is the live-tail row's load against the bare floor at
// addr, as fanout is against PicoMQ: a subscriber; a first record (not
// measured) whose delivery shows the subscription is live; then rate
// appends/s of size bytes for d, each carrying its send time (timedBody)
// and each waiting for its answer; and the append-to-delivery latency of
// every measured record once all have been delivered. Appends and
// records use two connections, or one with oneConn (a reader goroutine
// then hands the answers to the appender, as a NATS client's does). A
// record delivered twice, out of order, unasked or not within 30 s fails
// the load.
func tailFloorLoad(ctx context.Context, addr string, oneConn bool, rate, size int, d time.Duration) (*benchreport.Latency, error) {
	t, err := dialTail(ctx, addr, oneConn, time.Now().Add(d+2*time.Minute))
	if err != nil {
		return nil, err
	}
	defer t.close()
	var h hdr.Histogram
	delivered := make(chan int64, 1<<16) // each record's send time
	answers := make(chan int64, 1)       // with oneConn
	readDone := make(chan error, 1)
	go func() {
		var buf []byte
		for {
			rec, ans, err := readTailFrame(t.subR, buf)
			if err == nil && ans >= 0 && !oneConn {
				err = errors.New("an append's answer on the subscriber's connection")
			}
			if err != nil {
				readDone <- err
				return
			}
			if ans >= 0 {
				answers <- ans
				continue
			}
			now := time.Now().UnixNano()
			sent := sentAt(rec)
			if sent > 0 {
				h.Record(now - sent)
			}
			delivered <- sent
			buf = rec
		}
	}()
	// appendOne appends a record and waits for its answer.
	appendOne := func(rec []byte) error {
		if err := t.send(rec); err != nil {
			return err
		}
		if !oneConn {
			_, err := t.answer()
			return err
		}
		select {
		case <-answers:
			return nil
		case err := <-readDone:
			return fmt.Errorf("append answer: %w", err)
		case <-time.After(30 * time.Second):
			return errors.New("no append answer after 30 s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// await takes the next delivery, which must carry sent.
	await := func(sent int64) error {
		select {
		case got := <-delivered:
			if got != sent {
				return fmt.Errorf("delivered the record sent at %d, want %d's", got, sent)
			}
			return nil
		case err := <-readDone:
			return fmt.Errorf("subscriber: %w", err)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("record sent at %d not delivered after 30 s", sent)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := appendOne(timedBody(0, size, "")); err != nil {
		return nil, err
	}
	if err := await(0); err != nil {
		return nil, fmt.Errorf("first record: %w", err)
	}
	var sent []int64
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for k := 0; time.Since(start) < d && ctx.Err() == nil; k++ {
		if w := time.Until(start.Add(time.Duration(k) * interval)); w > 0 {
			time.Sleep(w)
		}
		now := time.Now().UnixNano()
		if err := appendOne(timedBody(now, size, "")); err != nil {
			return nil, err
		}
		sent = append(sent, now)
	}
	for _, s := range sent {
		if err := await(s); err != nil {
			return nil, err
		}
	}
	t.sub.Close() // ends the reader: h is its alone until then
	<-readDone
	if len(delivered) > 0 {
		return nil, fmt.Errorf("%d records delivered that were not appended", len(delivered))
	}
	if h.Count() == 0 {
		return nil, errors.New("no record measured")
	}
	return latencyOf(&h), nil
}
