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
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &floorServer{dir: *dir, logs: map[byte]*floorLog{}}
	if *followers != "" {
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
		return l.serveClient(r, c)
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
	l := &floorLog{f: f, in: make(chan floorAppend, 1024), followers: followers, ackSignal: make(chan struct{}, 1)}
	for _, c := range followers {
		go l.readAcks(c)
	}
	go l.commit()
	return l, nil
}

// serveClient answers one client's appends in turn.
func (l *floorLog) serveClient(r *bufio.Reader, w io.Writer) error {
	done := make(chan int64, 1)
	var hdr [8]byte
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
		binary.BigEndian.PutUint64(hdr[:], uint64(off))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
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
// last of them, then the answers.
func (l *floorLog) sync(groups <-chan floorGroup) {
	var ready []floorGroup
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
		ok := unix.Fdatasync(int(l.f.Fd())) == nil
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
