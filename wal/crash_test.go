package wal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	crashDirEnv   = "PICOMQ_WAL_CRASH_DIR"
	crashStartEnv = "PICOMQ_WAL_CRASH_START"
	// Small segments so that kills land during rotation and
	// preallocation as well as during ordinary commits.
	crashSegSize = 256 << 10
)

// crashPayload is the one payload sequence number seq can have. The parent
// checks every recovered entry against it, so an entry with bytes that
// were never sent cannot pass. One in five is larger than a 4 KiB page, so
// torn writes also split entries across pages.
func crashPayload(seq uint64) []byte {
	h := seq * 0x9E3779B97F4A7C15
	size := 8 + int(h>>40)%400
	if (h>>32)%5 == 0 {
		size = 4097 + int(h>>20)%12000
	}
	return payload(seq, size)
}

// TestCrashChild is the process TestCrash kills. It appends from several
// goroutines and prints "ack <seq>" for every entry only after Wait has
// returned for it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrash")
	}
	start, err := strconv.ParseUint(os.Getenv(crashStartEnv), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", crashStartEnv, err)
	}
	// Never outlive a parent that died without killing us.
	time.AfterFunc(20*time.Second, func() { os.Exit(3) })

	// Logs go to stderr, which the parent shows if the round fails.
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	w, _, err := Open(Options{Dir: dir, SegmentSize: crashSegSize, Logger: logger})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: Open:", err)
		os.Exit(2)
	}
	var next atomic.Uint64
	next.Store(start)
	var outMu sync.Mutex
	ack := func(seqs ...uint64) {
		var b []byte
		for _, s := range seqs {
			b = fmt.Appendf(b, "ack %d\n", s)
		}
		outMu.Lock()
		os.Stdout.Write(b) // unbuffered: an ack must be out before the next kill can land
		outMu.Unlock()
	}
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	for g := range 8 {
		go func() {
			for {
				if g%2 == 0 {
					seq := next.Add(1) - 1
					if _, err := w.Append(ctx, crashPayload(seq)); err != nil {
						die(err)
					}
					ack(seq)
					continue
				}
				// Enqueue a few, wait for the last: in-order durability
				// acknowledges all of them.
				var seqs []uint64
				var last *Pending
				for range 1 + g/2 {
					seq := next.Add(1) - 1
					p, err := w.Enqueue(crashPayload(seq))
					if err != nil {
						die(err)
					}
					seqs, last = append(seqs, seq), p
				}
				if err := last.Wait(ctx); err != nil {
					die(err)
				}
				ack(seqs...)
			}
		}()
	}
	select {}
}

// TestCrash runs TestCrashChild in a child process, SIGKILLs it after a
// random number of acknowledgements, and checks the recovered log: every
// acknowledged entry is present once with identical bytes, and every entry
// present is one the child sent. Each round continues the same log.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	acked := map[uint64]bool{}
	var start uint64
	deadline := time.Now().Add(25 * time.Second)
	for round := range 5 {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: out of time", round)
		}
		killAt := 100 + rng.IntN(2500)
		got := runAndKill(t, dir, start, killAt)
		for _, s := range got {
			acked[s] = true
		}

		w, rep, err := Open(Options{Dir: dir, SegmentSize: crashSegSize, Logger: testLogger(t)})
		if err != nil {
			t.Fatalf("round %d: Open after SIGKILL: %v", round, err)
		}
		seen := map[uint64]int{}
		var positions []Pos
		err = w.Replay(func(pos Pos, data []byte) error {
			if len(data) < 8 {
				return fmt.Errorf("entry at %+v has %d bytes: never sent", pos, len(data))
			}
			seq := binary.LittleEndian.Uint64(data)
			if !bytes.Equal(data, crashPayload(seq)) {
				return fmt.Errorf("entry at %+v claims seq %d but is not its payload: never sent", pos, seq)
			}
			if seen[seq]++; seen[seq] > 1 {
				return fmt.Errorf("seq %d appears twice (again at %+v)", seq, pos)
			}
			positions = append(positions, pos)
			start = max(start, seq+1)
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for s := range acked {
			if seen[s] != 1 {
				t.Fatalf("round %d: acknowledged seq %d lost (%d acked in total, %d entries recovered)",
					round, s, len(acked), len(seen))
			}
		}
		if rep.Entries != len(seen) {
			t.Fatalf("round %d: report counts %d entries, Replay saw %d", round, rep.Entries, len(seen))
		}
		// Positions from Replay must serve ReadAt as well.
		for i := 0; i < len(positions); i += 1 + len(positions)/50 {
			data, err := w.ReadAt(positions[i], nil)
			if err != nil || !bytes.Equal(data, crashPayload(binary.LittleEndian.Uint64(data))) {
				t.Fatalf("round %d: ReadAt(%+v): %v", round, positions[i], err)
			}
		}
		t.Logf("round %d: killed after %d acks; recovered %d entries in %d segments; torn %d bytes in segment %d",
			round, len(got), rep.Entries, rep.Segments, rep.TornBytes, rep.TornSegment)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		start = max(start, maxKey(acked)+1)
	}
}

func maxKey(m map[uint64]bool) uint64 {
	var k uint64
	for s := range m {
		k = max(k, s)
	}
	return k
}

// runAndKill starts the child on dir, SIGKILLs it once it has acknowledged
// killAt entries, and returns every sequence number it acknowledged.
func runAndKill(t *testing.T, dir string, start uint64, killAt int) []uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashStartEnv+"="+strconv.FormatUint(start, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acks []uint64
	r := bufio.NewReader(out)
	killed := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			// A line without its newline was cut by the kill: it does
			// not count as an acknowledgement.
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
		s, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "ack ")
		if !ok {
			continue // test framework chatter
		}
		seq, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("child printed %q", line)
		}
		acks = append(acks, seq)
		if len(acks) == killAt && !killed {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited by itself after %d acks (%v); stderr:\n%s", len(acks), err, stderr.String())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("child did not die of SIGKILL: %v; stderr:\n%s", err, stderr.String())
	}
	return acks
}
