package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// caddyEnv names the optional Caddy Durable Streams peer: the path of a
// Caddy binary built with the durable-streams plugin (the matrix starts
// it), or the base URL of one already running. make bench never builds
// it (docs/benchmarks.md says why and how to run it).
const caddyEnv = "PICOMQ_BENCH_CADDY"

// caddyClients are the concurrencies of the Caddy rows.
var caddyClients = []int{1, 16, 64}

const caddyPeer = "Durable Streams Caddy server (Go, file store, fsync per append)"

// dsCaddyRows: Durable Streams appends (100 B, text/plain, one stream per
// client) at 1, 16 and 64 clients, PicoMQ (the node at picoURL) next to
// the Caddy server, the two measured one after the other at each point
// (Caddy first in even runs). Without PICOMQ_BENCH_CADDY the one row says
// it was not run.
func (m *matrix) dsCaddyRows(ctx context.Context, run int, picoURL string) {
	spec := os.Getenv(caddyEnv)
	if spec == "" {
		m.row(benchreport.Row{ID: "ds-caddy", What: "Durable Streams appends, 1 / 16 / 64 clients, 100 B, vs the Caddy server",
			Unit: "appends/s", Peer: "Caddy: not run (set " + caddyEnv + ")"})
		return
	}
	caddyURL, stop, err := m.startCaddy(spec)
	if err != nil {
		m.fail("Caddy Durable Streams server", err)
		return
	}
	defer stop()
	for _, c := range caddyClients {
		id := m.row(benchreport.Row{ID: fmt.Sprintf("ds-caddy-c%d", c),
			What: fmt.Sprintf("Durable Streams appends vs Caddy, %s, 100 B, text/plain stream", clients(c)),
			Unit: "appends/s", Peer: caddyPeer, Group: "Durable Streams appends vs Caddy, 100 B", X: c})
		prefix := fmt.Sprintf("/mb/r%d/%s", run, id)
		sides := []struct{ side, url string }{{benchreport.SidePico, picoURL}, {benchreport.SidePeer, caddyURL}}
		if run%2 == 0 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		var got [2]float64
		for i, s := range sides {
			args := []string{"--content-type", "text/plain"}
			if s.side == benchreport.SidePeer {
				args = append(args, "--metrics", "off") // Caddy has no PicoMQ metrics
			}
			r, err := m.picoBench(ctx, s.url, "durable-streams", prefix, c, 100, args...)
			if err != nil {
				m.fail(id+" "+s.side, err)
				continue
			}
			m.res.Add(id, run, s.side, r.RecordsPerSec, &r.Lat)
			got[i] = r.RecordsPerSec
		}
		logf("  %s: %s %.0f/s, %s %.0f/s", id, sides[0].side, got[0], sides[1].side, got[1])
	}
}

// startCaddy returns the base URL of the Caddy peer: spec itself when it
// is a URL, else spec is a binary started here on loopback with a
// file-backed store (data_dir: every append is fsynced before the ack)
// in a fresh directory under the work dir.
func (m *matrix) startCaddy(spec string) (string, func(), error) {
	if strings.HasPrefix(spec, "http://") || strings.HasPrefix(spec, "https://") {
		return strings.TrimSuffix(spec, "/"), func() {}, nil
	}
	dir, err := os.MkdirTemp(m.cfg.work, "caddy-")
	if err != nil {
		return "", nil, err
	}
	addr, err := testproc.FreeAddr()
	if err != nil {
		return "", nil, err
	}
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
}

http://%s {
	bind 127.0.0.1
	route /v1/stream/* {
		durable_streams {
			data_dir %s
		}
	}
}
`, addr, filepath.Join(dir, "data"))
	cf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(spec, "run", "--config", cf, "--adapter", "caddyfile")
	cmd.Dir = dir
	// Caddy's own state (certificates, autosave) stays in the work dir.
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	p, err := startCmd("caddy", cmd, nil)
	if err != nil {
		return "", nil, err
	}
	err = testproc.WaitFor(func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}, p.done, time.Minute)
	if err != nil {
		p.stop()
		return "", nil, fmt.Errorf("caddy: %v\n%s", err, p.tail())
	}
	return "http://" + addr, p.stop, nil
}
