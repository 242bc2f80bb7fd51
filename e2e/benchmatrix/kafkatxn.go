package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/PicoMQ/picomq/internal/benchreport"
)

// kafkaTxnProduces is how many ProduceSync calls (of kafkaBatch records)
// one transaction holds: a consume-transform-produce loop commits once per
// poll of about a thousand records.
const kafkaTxnProduces = 10

// kafkaTxnRows: transactional produce (issue 30: at least 0.7x the
// non-transactional rate) next to the same producers without
// transactions, at 1 partition x 1 producer and 16 partitions x 8.
func (m *matrix) kafkaTxnRows(ctx context.Context, run int) error {
	pprofFlags, pprofAddr := pprofArgs()
	n, addr, admin, err := m.startKafkaNode("pico-kafka-txn", pprofFlags...)
	if err != nil {
		return err
	}
	defer n.stop()
	defer admin.Close()
	for _, p := range []struct {
		parts int32
		prods int
	}{{1, 1}, {16, 8}} {
		load := fmt.Sprintf("%s, %s", plural(int(p.parts), "partition"), plural(p.prods, "producer"))
		row := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-txn-p%d-c%d", p.parts, p.prods),
			What: fmt.Sprintf("Kafka transactional produce (franz-go, %d ProduceSync of %d x 1 KiB per transaction, then commit), %s",
				kafkaTxnProduces, kafkaBatch, load),
			Unit: "records/s",
			Peer: "the same producers without transactions (idempotent, acks=all), same topic shape",
			Pico: "PicoMQ Kafka transactional produce", Note: "issue 30 target: >= 0.7x"})
		plain := fmt.Sprintf("bench-txn-r%d-plain-p%d-c%d", run, p.parts, p.prods)
		txn := fmt.Sprintf("bench-txn-r%d-txn-p%d-c%d", run, p.parts, p.prods)
		if err := createTopic(ctx, admin, plain, p.parts); err != nil {
			m.fail(row, err)
			continue
		}
		if err := createTopic(ctx, admin, txn, p.parts); err != nil {
			m.fail(row, err)
			continue
		}
		// The side measured second pays for the first one's background
		// work (its flushes and compaction): plain first in odd runs,
		// transactional first in even ones.
		var (
			k, t       float64
			kLat, tLat *benchreport.Latency
			kErr, tErr error
		)
		// With PICOMQ_BENCH_PROFILE_DIR, the transactional side is
		// profiled (node and client, CPU and execution trace).
		txnProduce := func() (float64, *benchreport.Latency, error) {
			defer profileRead(fmt.Sprintf("kafka-txn-p%d-c%d-r%d", p.parts, p.prods, run), pprofAddr)()
			return m.kafkaTxnProduce(ctx, addr, txn, p.prods, run)
		}
		if run%2 == 1 {
			k, kLat, kErr = m.kafkaProduce(ctx, addr, plain, p.prods)
			if kErr == nil {
				t, tLat, tErr = txnProduce()
			}
		} else {
			t, tLat, tErr = txnProduce()
			if tErr == nil {
				k, kLat, kErr = m.kafkaProduce(ctx, addr, plain, p.prods)
			}
		}
		if kErr != nil {
			m.fail(row+" plain", kErr)
			continue
		}
		if tErr != nil {
			m.fail(row+" transactional", tErr)
			continue
		}
		m.res.Add(row, run, benchreport.SidePico, t, tLat)
		m.res.Add(row, run, benchreport.SidePeer, k, kLat)
		logf("  %s: transactional %.0f records/s (p99 per transaction %.1f ms), plain %.0f records/s: %.2fx",
			row, t, tLat.P99, k, t/k)
	}
	return nil
}

// kafkaTxnProduce runs prods transactional producers (one client and
// transactional id each), closed loop over whole transactions, and returns
// records/s and the latency of a transaction (begin to committed).
func (m *matrix) kafkaTxnProduce(ctx context.Context, addr, topic string, prods, run int) (float64, *benchreport.Latency, error) {
	clients := make([]*kgo.Client, prods)
	for i := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(fmt.Sprintf("%s-%d-%d", topic, run, i)),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProducerBatchMaxBytes(4<<20))
		if err != nil {
			return 0, nil, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	val := bytes.Repeat([]byte{'v'}, kafkaRecord)
	recs := make([][]*kgo.Record, prods)
	for w := range recs {
		recs[w] = make([]*kgo.Record, kafkaBatch)
	}
	rate, lat, err := closedLoop(ctx, prods, m.cfg.warmup, m.cfg.secs, func(w int) error {
		cl := clients[w]
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		for range kafkaTxnProduces {
			for i := range recs[w] {
				recs[w][i] = &kgo.Record{Value: val}
			}
			if err := cl.ProduceSync(ctx, recs[w]...).FirstErr(); err != nil {
				return err
			}
		}
		return cl.EndTransaction(ctx, kgo.TryCommit)
	})
	return rate * kafkaBatch * kafkaTxnProduces, lat, err
}
