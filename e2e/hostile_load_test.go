package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// attackers holds n connections of one kind open for as long as ctx runs:
// each dials, runs attack, waits for the node to close it, and dials
// again. It records how long the longest-lived connection lasted (from
// the dial to the close) and how many outlived limit + 2 s.
type attackers struct {
	name     string
	limit    time.Duration
	closed   atomic.Int64
	over     atomic.Int64
	dialFail atomic.Int64
	mu       sync.Mutex
	max      time.Duration
}

func (a *attackers) run(ctx context.Context, wg *sync.WaitGroup, n int, addr string, attack func(ctx context.Context, c net.Conn)) {
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the first dials over the limit so the flood builds up
			// like a real one and the reconnects do not come in waves of
			// a thousand at once.
			select {
			case <-time.After(time.Duration(i) * a.limit / time.Duration(n)):
			case <-ctx.Done():
				return
			}
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, 5*time.Second)
				// A connection's life is counted from the end of the
				// handshake: a dial whose SYN the kernel dropped (a full
				// listen queue, under a thousand attackers on a loaded
				// machine) waits 1 s or more before the node can see it,
				// and no server bound covers that.
				start := time.Now()
				if err != nil {
					a.dialFail.Add(1)
					select {
					case <-time.After(100 * time.Millisecond):
					case <-ctx.Done():
					}
					continue
				}
				stop := context.AfterFunc(ctx, func() { _ = c.Close() })
				go attack(ctx, c)
				_ = c.SetReadDeadline(start.Add(a.limit + 30*time.Second))
				_, _ = io.Copy(io.Discard, c)
				life := time.Since(start)
				_ = c.Close()
				if !stop() {
					// ctx ended and we closed it: it counts only if it had
					// outlived its limit already.
					if life > a.limit+2*time.Second {
						a.over.Add(1)
					}
					return
				}
				a.closed.Add(1)
				if life > a.limit+2*time.Second {
					a.over.Add(1)
				}
				a.mu.Lock()
				a.max = max(a.max, life)
				a.mu.Unlock()
			}
		}()
	}
}

func (a *attackers) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("%s: %d closed by the node, longest %s (limit %s), %d over limit + 2 s, %d failed dials",
		a.name, a.closed.Load(), a.max.Round(time.Millisecond), a.limit, a.over.Load(), a.dialFail.Load())
}

// appendLatencies appends for d through the Go client and returns each
// append's latency and the number of errors.
func appendLatencies(ctx context.Context, s picomq.Stream, d time.Duration, tag string) ([]time.Duration, int) {
	var lat []time.Duration
	errs := 0
	for end := time.Now().Add(d); time.Now().Before(end) && ctx.Err() == nil; {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		start := time.Now()
		_, err := s.Append(actx, picomq.AppendRecord{Body: []byte(tag + "-" + fmt.Sprint(len(lat)))})
		cancel()
		if err != nil {
			errs++
			continue
		}
		lat = append(lat, time.Since(start))
	}
	return lat, errs
}

func p99(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

// TestHostileLoad (issue 27): with --max-connections 2000, 1,000
// slowloris, 300 silent and 300 body-withholding HTTP connections and 100
// unauthenticated Kafka connections are held against one node for 30 s
// (each reconnecting when the node closes it), while a well-behaved
// client appends. The client sees no error and a p99 within 5x its quiet
// p99 (the slower of 5 s before and 5 s after the attack, at least 10 ms),
// the node's RSS stays bounded, and every attacking connection is
// closed within its documented limit (docs/security.md, Connection
// bounds) + 2 s.
func TestHostileLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("hostile load runs 40 s")
	}
	const rht, bodyTO = 2 * time.Second, 3 * time.Second
	// 1,700 attacking sockets in this process and as many in the node
	// (which inherits the limit).
	raiseFileLimit(t, 8192)
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	p, kafkaAddr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens,
		"--max-connections", "2000", "--read-header-timeout", rht.String(), "--body-timeout", bodyTO.String())
	pid := p.Cmd.Process.Pid
	host := strings.TrimPrefix(p.URL, "http://")
	wantStatus(t, do(t, "PUT", p.URL+"/load/good", nil, append(bearerHdr(rootToken), "Content-Type", "text/plain")...), 201, "create")
	cl, err := picomq.NewPico(p.URL, picomq.WithToken(rootToken))
	if err != nil {
		t.Fatal(err)
	}
	s := cl.Stream("/load/good")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Quiet: warm up, then measure.
	if _, errs := appendLatencies(ctx, s, time.Second, "warm"); errs != 0 {
		t.Fatalf("warm-up: %d errors", errs)
	}
	quiet, errs := appendLatencies(ctx, s, 5*time.Second, "quiet")
	if errs != 0 || len(quiet) < 20 {
		t.Fatalf("quiet: %d appends, %d errors", len(quiet), errs)
	}
	rssStart := rssBytes(t, pid)

	actx, stopAttack := context.WithCancel(ctx)
	var wg sync.WaitGroup
	slowloris := &attackers{name: "slowloris", limit: rht}
	silent := &attackers{name: "silent", limit: rht}
	withhold := &attackers{name: "body-withholding", limit: bodyTO}
	kafkaLogin := &attackers{name: "unauthenticated Kafka", limit: rht}
	slowloris.run(actx, &wg, 1000, host, func(ctx context.Context, c net.Conn) {
		head := "POST /load/good HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)
		for i := 0; i < len(head) && ctx.Err() == nil; i++ {
			if _, err := c.Write([]byte{head[i]}); err != nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	silent.run(actx, &wg, 300, host, func(context.Context, net.Conn) {})
	withhold.run(actx, &wg, 300, host, func(_ context.Context, c net.Conn) {
		_, _ = io.WriteString(c, "POST /load/x HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\nx")
	})
	kafkaLogin.run(actx, &wg, 100, kafkaAddr, func(ctx context.Context, c net.Conn) {
		// ApiVersions v0 now and then, never a login.
		for i := int32(1); ctx.Err() == nil; i++ {
			if _, err := c.Write([]byte{0, 0, 0, 10, 0, 18, 0, 0, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i), 0, 0}); err != nil {
				return
			}
			time.Sleep(700 * time.Millisecond)
		}
	})

	var rssMax atomic.Int64
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-actx.Done():
				return
			case <-tk.C:
				if r := rssBytes(t, pid); r > rssMax.Load() {
					rssMax.Store(r)
				}
			}
		}
	}()
	// Let the flood build up, then measure the good client for 30 s.
	time.Sleep(2 * time.Second) // not synchronisation: the attack's ramp before the measured window
	loaded, errs := appendLatencies(ctx, s, 30*time.Second, "loaded")
	stopAttack()
	wg.Wait()
	<-rssDone
	// Quiet again: the machine is shared, so the baseline is the slower
	// of the quiet windows around the attack, not one taken before others'
	// load changed.
	after, afterErrs := appendLatencies(ctx, s, 5*time.Second, "after")

	qp, lp := max(p99(quiet), p99(after)), p99(loaded)
	t.Logf("good client: quiet %d appends p99 %s, after %d appends p99 %s; under attack %d appends p99 %s, %d errors",
		len(quiet), p99(quiet), len(after), p99(after), len(loaded), lp, errs)
	if afterErrs != 0 {
		t.Errorf("the well-behaved client got %d errors after the attack", afterErrs)
	}
	t.Logf("node RSS %d MiB before, at most %d MiB under attack", rssStart>>20, rssMax.Load()>>20)
	for _, a := range []*attackers{slowloris, silent, withhold, kafkaLogin} {
		t.Log(a)
	}
	if errs != 0 {
		t.Errorf("the well-behaved client got %d errors under attack", errs)
	}
	// A p99 under 10 ms is scheduling noise on a shared 2-core machine
	// (load averages of 30 seen): compare from there.
	if lp > 5*max(qp, 10*time.Millisecond) {
		t.Errorf("p99 under attack %s > 5x quiet p99 %s", lp, qp)
	}
	if grew := rssMax.Load() - rssStart; grew > 256<<20 {
		t.Errorf("node RSS grew by %d MiB under attack", grew>>20)
	}
	for _, a := range []*attackers{slowloris, silent, withhold, kafkaLogin} {
		if a.closed.Load() == 0 {
			t.Errorf("%s: the node closed none", a.name)
		}
		if a.over.Load() != 0 {
			t.Errorf("%s", a)
		}
	}
	// The node still serves a new client.
	wantStatus(t, do(t, "GET", p.URL+"/healthz", nil), 200, "healthz after the attack")
}
