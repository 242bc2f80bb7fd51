package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// kliteRows (issue 30): Kafka produce through PicoMQ and through klite
// (a single-binary Kafka broker on S3, built outside the repository:
// docs/benchmarks.md) side by side, both on the matrix's MinIO, with the
// same franz-go producers as the kafka rows (acks=all, idempotent), at 1
// partition x 1 producer, 16 x 1 and 16 x 8, and the p99 of a
// ProduceSync at 16 x 8 (target: at most 1.2x klite's). Both acknowledge
// after their own WAL's fsync and upload to S3 in the background. Without
// -klite the rows are not measured.
func (m *matrix) kliteRows(ctx context.Context, run int) error {
	if m.cfg.klite == "" {
		m.fail("kafka vs klite", fmt.Errorf("no -klite binary (make bench KLITE=path): see docs/benchmarks.md"))
		return nil
	}
	s3, err := m.minio()
	if err != nil {
		return err
	}
	prefix := fmt.Sprintf("klite-r%d", run)
	pAddr, err := testproc.FreeAddr()
	if err != nil {
		return err
	}
	n, err := m.startNode("pico-kafka-s3", "--object-store", s3.url(prefix+"/pico"), "--kafka-addr", pAddr)
	if err != nil {
		return err
	}
	defer n.stop()
	k, kAddr, err := m.startKlite(s3, prefix+"/klite")
	if err != nil {
		return err
	}
	defer k.stop()
	pAdmin, err := kgo.NewClient(kgo.SeedBrokers(pAddr))
	if err != nil {
		return err
	}
	defer pAdmin.Close()
	kAdmin, err := kgo.NewClient(kgo.SeedBrokers(kAddr))
	if err != nil {
		return err
	}
	defer kAdmin.Close()

	for _, p := range []struct {
		parts int32
		prods int
	}{{1, 1}, {16, 1}, {16, 8}} {
		load := fmt.Sprintf("%s, %s", plural(p.prods, "producer"), plural(int(p.parts), "partition"))
		rate := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-klite-p%d-c%d", p.parts, p.prods),
			What: fmt.Sprintf("Kafka produce on MinIO (franz-go, acks=all, idempotent, %d x 1 KiB per ProduceSync), %s", kafkaBatch, load),
			Unit: "records/s", Peer: "klite on the same MinIO, same producers",
			Pico: "PicoMQ Kafka produce (MinIO)"})
		var p99 string
		if p.parts == 16 && p.prods == 8 {
			p99 = m.row(benchreport.Row{ID: "kafka-klite-p99-p16-c8",
				What: "Kafka produce latency p99 on MinIO, " + load, Unit: "ms", LowerBetter: true,
				Peer: "klite on the same MinIO, same producers", Note: "issue 30 target: <= 1.2x klite"})
		}
		topic := fmt.Sprintf("bench-klite-r%d-p%d-c%d", run, p.parts, p.prods)
		if err := createTopic(ctx, pAdmin, topic, p.parts); err != nil {
			m.fail(rate+" PicoMQ", err)
			continue
		}
		if err := createTopic(ctx, kAdmin, topic, p.parts); err != nil {
			m.fail(rate+" klite", err)
			continue
		}
		pr, pLat, err := m.kafkaProduce(ctx, pAddr, topic, p.prods)
		if err != nil {
			m.fail(rate+" PicoMQ", err)
			continue
		}
		kr, kLat, err := m.kafkaProduce(ctx, kAddr, topic, p.prods)
		if err != nil {
			m.fail(rate+" klite", err)
			continue
		}
		m.res.Add(rate, run, benchreport.SidePico, pr, pLat)
		m.res.Add(rate, run, benchreport.SidePeer, kr, kLat)
		if p99 != "" {
			m.res.Add(p99, run, benchreport.SidePico, pLat.P99, nil)
			m.res.Add(p99, run, benchreport.SidePeer, kLat.P99, nil)
		}
		logf("  %s: PicoMQ %.0f records/s (p99 %.1f ms), klite %.0f records/s (p99 %.1f ms): %.2fx, p99 %.2fx",
			rate, pr, pLat.P99, kr, kLat.P99, pr/kr, pLat.P99/kLat.P99)
	}
	return nil
}

// startKlite starts klite on a free port with its WAL in the work dir and
// its objects in s3 under prefix (credentials from the environment
// startMinio set), and waits until it answers Kafka requests.
func (m *matrix) startKlite(s3 minio, prefix string) (*proc, string, error) {
	dir, err := os.MkdirTemp(m.cfg.work, "klite-")
	if err != nil {
		return nil, "", err
	}
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(m.cfg.klite, "--listen", addr, "--data-dir", dir, "--log-level", "warn",
		"--s3-bucket", s3.bucket, "--s3-endpoint", s3.endpoint, "--s3-region", s3.regionOrDefault(), "--s3-prefix", s3.root+prefix)
	p, err := startCmd("klite", cmd, nil)
	if err != nil {
		return nil, "", err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		p.stop()
		return nil, "", err
	}
	defer cl.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cl.Ping(pctx)
		cancel()
		if err == nil {
			return p, addr, nil
		}
		select {
		case <-p.done:
			return nil, "", fmt.Errorf("klite exited: %s", p.tail())
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, "", fmt.Errorf("klite not ready after a minute: %v\n%s", err, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
