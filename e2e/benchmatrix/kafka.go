package main

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	picomq "github.com/PicoMQ/picomq/client/go"
	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// Kafka load (issue 13's make bench item): franz-go producers, each
// sending batches of kafkaBatch 1 KiB records (ProduceSync, acks=all,
// idempotent, no compression), closed loop; then one consumer reading
// the topic from the start, at most kafkaConsumeMax records.
const (
	kafkaBatch      = 100
	kafkaRecord     = 1024
	kafkaConsumeMax = 10000
)

// kafkaPoints are the (partitions, producers) of the Kafka rows.
var kafkaPoints = []struct {
	parts int32
	prods int
}{{1, 1}, {1, 8}, {16, 1}, {16, 8}}

// kafkaRows: Kafka produce over 1 and 16 partitions from 1 and 8
// producers, each point next to Pico binary-batch appends of the same
// records (picomq bench --batch, the same number of producers over as
// many streams as partitions) and to the WAL alone appending the same
// RecordBatches from as many writers; then Kafka consume next to Pico
// HTTP reads of the same number of records. All on one node, one run.
func (m *matrix) kafkaRows(ctx context.Context, run int) error {
	n, addr, admin, err := m.startKafkaNode("pico-kafka")
	if err != nil {
		return err
	}
	defer n.stop()
	defer admin.Close()

	// The WAL alone, once per producer count: the same entries whatever
	// the partitions.
	type walPoint struct {
		rate float64
		lat  *benchreport.Latency
	}
	walAt := map[int]walPoint{}
	for _, p := range kafkaPoints {
		if _, ok := walAt[p.prods]; ok {
			continue
		}
		rate, lat, err := m.walAlone(ctx, p.prods, walEntry(kafkaBatch, kafkaRecord))
		if err != nil {
			return fmt.Errorf("WAL alone, %d writers: %w", p.prods, err)
		}
		walAt[p.prods] = walPoint{rate * kafkaBatch, lat}
	}

	for _, p := range kafkaPoints {
		parts, prods := p.parts, p.prods
		load := fmt.Sprintf("%s, %s", plural(prods, "producer"), plural(int(parts), "partition"))
		group := "Kafka produce, " + plural(int(parts), "partition")
		rate := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-p%d-c%d", parts, prods),
			What:  fmt.Sprintf("Kafka produce (franz-go, acks=all, idempotent, %d x 1 KiB per ProduceSync), %s", kafkaBatch, load),
			Unit:  "records/s",
			Peer:  fmt.Sprintf("Pico binary-batch appends of the same records (%d per append), same producers, one stream per partition", kafkaBatch),
			Group: group, X: prods, Pico: "PicoMQ Kafka produce"})
		mbs := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-wal-p%d-c%d", parts, prods),
			What: "Kafka produce MB/s of record values, " + load, Unit: "MB/s",
			Peer: fmt.Sprintf("WAL alone, the same RecordBatches, %s", plural(prods, "writer")), Pico: "PicoMQ Kafka produce"})
		p99 := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-p99-p%d-c%d", parts, prods),
			What: "Kafka produce latency p99, " + load, Unit: "ms", LowerBetter: true,
			Peer: fmt.Sprintf("WAL alone p99, the same RecordBatches, %s", plural(prods, "writer"))})
		topic := fmt.Sprintf("bench-r%d-p%d-c%d", run, parts, prods)
		if err := createTopic(ctx, admin, topic, parts); err != nil {
			m.fail(rate, err)
			continue
		}
		k, kLat, err := m.kafkaProduce(ctx, addr, topic, prods)
		if err != nil {
			m.fail(rate+" Kafka", err)
			continue
		}
		w := walAt[prods]
		m.res.Add(rate, run, benchreport.SidePico, k, kLat)
		m.res.Add(mbs, run, benchreport.SidePico, k*kafkaRecord/1e6, nil)
		m.res.Add(mbs, run, benchreport.SidePeer, w.rate*kafkaRecord/1e6, nil)
		m.res.Add(p99, run, benchreport.SidePico, kLat.P99, nil)
		m.res.Add(p99, run, benchreport.SidePeer, w.lat.P99, nil)

		prefix := fmt.Sprintf("/mb/r%d/kafka-p%d-c%d", run, parts, prods)
		q, err := m.picoBench(ctx, n.url, "pico", prefix, prods, kafkaRecord,
			"--batch", fmt.Sprint(kafkaBatch), "--streams", fmt.Sprint(parts), "--keep")
		if err != nil {
			m.fail(rate+" Pico batches", err)
			continue
		}
		m.res.Add(rate, run, benchreport.SidePeer, q.RecordsPerSec, &q.Lat)
		logf("  %s: Kafka %.0f records/s (p50 %.1f, p99 %.1f ms), Pico batches %.0f/s, WAL alone %.0f/s (p99 %.1f ms)",
			rate, k, kLat.P50, kLat.P99, q.RecordsPerSec, w.rate, w.lat.P99)

		if prods != 8 {
			continue
		}
		cons := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-consume-p%d", parts),
			What: fmt.Sprintf("Kafka consume from the start (one franz-go consumer), %s, the records produced above (at most %d)", plural(int(parts), "partition"), kafkaConsumeMax),
			Unit: "records/s", Peer: "Pico HTTP reads of the same number of records from the Pico streams above (Go SDK, one reader)",
			Pico: "PicoMQ Kafka consume"})
		want := min(int64(k*m.cfg.secs.Seconds()), q.Records, kafkaConsumeMax)
		kc, err := kafkaConsume(ctx, addr, topic, want)
		if err != nil {
			m.fail(cons+" Kafka", err)
			continue
		}
		pc, err := picoConsume(ctx, n.url, prefix, int(parts), want)
		if err != nil {
			m.fail(cons+" Pico", err)
			continue
		}
		m.res.Add(cons, run, benchreport.SidePico, kc, nil)
		m.res.Add(cons, run, benchreport.SidePeer, pc, nil)
		logf("  %s: Kafka %.0f records/s, Pico reads %.0f records/s (%d records)", cons, kc, pc, want)
	}
	return nil
}

func createTopic(ctx context.Context, admin *kgo.Client, topic string, parts int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, admin)
	if err == nil && resp.Topics[0].ErrorCode != 0 {
		err = fmt.Errorf("error code %d", resp.Topics[0].ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// kafkaProduce runs prods franz-go producers (one client each) against
// topic, closed loop, and returns records/s and the ProduceSync latency.
func (m *matrix) kafkaProduce(ctx context.Context, addr, topic string, prods int) (float64, *benchreport.Latency, error) {
	clients := make([]*kgo.Client, prods)
	for i := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
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
		for i := range recs[w] {
			recs[w][i] = &kgo.Record{Value: val}
		}
		return clients[w].ProduceSync(ctx, recs[w]...).FirstErr()
	})
	return rate * kafkaBatch, lat, err
}

// kafkaConsume reads want records of topic from the start with one
// franz-go consumer and returns records/s.
func kafkaConsume(ctx context.Context, addr, topic string, want int64) (float64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	var got int64
	for got < want && cctx.Err() == nil {
		fs := cl.PollFetches(cctx)
		if err := fs.Err0(); err != nil && cctx.Err() == nil {
			return 0, err
		}
		got += int64(fs.NumRecords())
	}
	if got < want {
		return 0, fmt.Errorf("consumed %d of %d records", got, want)
	}
	return float64(got) / time.Since(t0).Seconds(), nil
}

// picoConsume reads want records from the streams prefix/0..streams-1 in
// turn with the Go SDK and returns records/s.
func picoConsume(ctx context.Context, url, prefix string, streams int, want int64) (float64, error) {
	c, err := picomq.NewPico(url)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	t0 := time.Now()
	var got int64
	for i := 0; i < streams && got < want; i++ {
		it := c.Stream(fmt.Sprintf("%s/%d", prefix, i)).Records(c.Beginning(), picomq.RecordsOptions{})
		for got < want && it.Next(ctx) {
			got++
		}
		if err := it.Err(); err != nil {
			return 0, err
		}
	}
	if got < want {
		return 0, fmt.Errorf("read %d of %d records", got, want)
	}
	return float64(got) / time.Since(t0).Seconds(), nil
}

// startKafkaNode starts a node with a Kafka listener on a free port and
// an admin client of it; on error nothing is left running.
func (m *matrix) startKafkaNode(name string, extra ...string) (*node, string, *kgo.Client, error) {
	addr, err := testproc.FreeAddr()
	if err != nil {
		return nil, "", nil, err
	}
	n, err := m.startNode(name, append([]string{"--kafka-addr", addr}, extra...)...)
	if err != nil {
		return nil, "", nil, err
	}
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		n.stop()
		return nil, "", nil, err
	}
	return n, addr, admin, nil
}
