package main

import (
	"bytes"
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/internal/benchreport"
	"github.com/PicoMQ/picomq/internal/testproc"
)

// Kafka produce load: kafkaProducers franz-go clients, each sending
// batches of kafkaBatch 1 KiB records (ProduceSync, acks=all, idempotent),
// closed loop.
const (
	kafkaProducers = 4
	kafkaBatch     = 100
	kafkaRecord    = 1024
)

// kafkaRows: Kafka produce over 1 and 16 partitions next to the WAL alone
// writing the same batches with the same concurrency.
func (m *matrix) kafkaRows(ctx context.Context, run int) error {
	addr, err := testproc.FreeAddr()
	if err != nil {
		return err
	}
	n, err := m.startNode("pico-kafka", "--kafka-addr", addr)
	if err != nil {
		return err
	}
	defer n.stop()
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err
	}
	defer admin.Close()
	val := bytes.Repeat([]byte{'v'}, kafkaRecord)
	walRate, walLat, err := m.walAlone(ctx, kafkaProducers, walEntry(kafkaBatch, kafkaRecord))
	if err != nil {
		return fmt.Errorf("WAL alone: %w", err)
	}
	walRate *= kafkaBatch
	for _, parts := range []int32{1, 16} {
		id := m.row(benchreport.Row{ID: fmt.Sprintf("kafka-p%d", parts),
			What: fmt.Sprintf("Kafka produce (franz-go, acks=all, %d producers x %d x 1 KiB per request), %s", kafkaProducers, kafkaBatch, plural(int(parts), "partition")),
			Unit: "records/s", Peer: fmt.Sprintf("WAL alone, the same batches, %d writers", kafkaProducers)})
		topic := fmt.Sprintf("bench-r%d-p%d", run, parts)
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, admin)
		if err == nil && resp.Topics[0].ErrorCode != 0 {
			err = fmt.Errorf("error code %d", resp.Topics[0].ErrorCode)
		}
		if err != nil {
			m.fail(id, fmt.Errorf("create topic: %w", err))
			continue
		}
		clients := make([]*kgo.Client, kafkaProducers)
		for i := range clients {
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic),
				kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
				kgo.ProducerBatchMaxBytes(4<<20))
			if err != nil {
				return err
			}
			defer cl.Close()
			clients[i] = cl
		}
		recs := make([][]*kgo.Record, kafkaProducers)
		for w := range recs {
			recs[w] = make([]*kgo.Record, kafkaBatch)
		}
		rate, lat, err := closedLoop(ctx, kafkaProducers, m.cfg.warmup, m.cfg.secs, func(w int) error {
			for i := range recs[w] {
				recs[w][i] = &kgo.Record{Value: val}
			}
			return clients[w].ProduceSync(ctx, recs[w]...).FirstErr()
		})
		if err != nil {
			m.fail(id, err)
			continue
		}
		m.res.Add(id, run, benchreport.SidePico, rate*kafkaBatch, lat)
		m.res.Add(id, run, benchreport.SidePeer, walRate, walLat)
		logf("  %s: Kafka %.0f records/s, WAL alone %.0f records/s", id, rate*kafkaBatch, walRate)
	}
	return nil
}
