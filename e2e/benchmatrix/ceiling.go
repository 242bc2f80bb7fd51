package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/PicoMQ/picomq/internal/benchreport"
)

// noopServer answers every HTTP/1.1 request with the same small JSON ack
// and does nothing else: no parsing beyond the head's Content-Length, no
// allocation per request, one write per burst of pipelined requests. The
// load generator's rate against it is the most the generator can send on
// this machine, so a row can say how much of that ceiling PicoMQ reaches.
type noopServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

// noopAck has the fields a Pico append ack has, so the client accepts it
// for creates, appends and deletes alike.
const noopAck = `{"offset":0,"nextOffset":1,"timestamp":1,"count":1,"duplicate":false}`

func startNoopServer() (*noopServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &noopServer{ln: ln}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *noopServer) url() string { return "http://" + s.ln.Addr().String() }

func (s *noopServer) stop() {
	s.ln.Close()
	s.wg.Wait()
}

func (s *noopServer) accept() {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	defer func() { // the listener is closed: end the connections too
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		open[c] = true
		mu.Unlock()
		conns.Add(1)
		go func() {
			defer conns.Done()
			serveNoop(c)
			mu.Lock()
			delete(open, c)
			mu.Unlock()
		}()
	}
}

var noopResponse = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
	strconv.Itoa(len(noopAck)) + "\r\n\r\n" + noopAck)

var contentLength = []byte("content-length:")

// serveNoop reads request heads and skips Content-Length bodies until the
// connection ends or sends something it cannot frame.
func serveNoop(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 16<<10)
	for {
		body := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 { // the empty line ending the head
				break
			}
			if len(line) > len(contentLength) && bytes.EqualFold(line[:len(contentLength)], contentLength) {
				n, err := strconv.Atoi(string(bytes.TrimSpace(line[len(contentLength):])))
				if err != nil || n < 0 {
					return
				}
				body = n
			}
		}
		if _, err := br.Discard(body); err != nil {
			return
		}
		bw.Write(noopResponse)
		if br.Buffered() == 0 {
			if err := bw.Flush(); err != nil {
				return
			}
		}
	}
}

// ceilingRow: httpRows' single-record load of c clients, 100 B, against
// the no-op server, next to PicoMQ's rate of the same point in this run.
func (m *matrix) ceilingRow(ctx context.Context, run, c int, pico loadResult, picoErr error) {
	id := m.row(benchreport.Row{ID: fmt.Sprintf("http-ceiling-c%d-s100", c),
		What: fmt.Sprintf("single-record HTTP appends, %s, 100 B: PicoMQ (as above) next to the same load generator against a no-op HTTP/1.1 server", clients(c)),
		Unit: "appends/s", Peer: "no-op server (the load generator's own ceiling on this machine)"})
	s, err := startNoopServer()
	if err != nil {
		m.fail(id, err)
		return
	}
	defer s.stop()
	r, err := m.picoBench(ctx, s.url(), "pico", fmt.Sprintf("/mb/r%d/ceiling-c%d", run, c), c, 100, "--metrics", "off")
	if err != nil {
		m.fail(id+" no-op server", err)
		return
	}
	if picoErr == nil {
		m.res.Add(id, run, benchreport.SidePico, pico.RecordsPerSec, &pico.Lat)
	}
	m.res.Add(id, run, benchreport.SidePeer, r.RecordsPerSec, &r.Lat)
	logf("  %s: PicoMQ %.0f/s, no-op server %.0f/s", id, pico.RecordsPerSec, r.RecordsPerSec)
}
