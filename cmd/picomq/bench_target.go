package main

// What picomq bench produces to and consumes from: the streams of a node
// over either HTTP protocol (the Go SDK), or a Kafka topic whose partitions
// are streams (franz-go). Producer i writes to stream (partition) i mod
// --streams; consumer i reads stream (partition) i mod --streams, so more
// consumers than streams is a fan-out.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	picomq "github.com/PicoMQ/picomq/client/go"
)

// appendFunc appends one batch and returns once it is acknowledged.
type appendFunc func(ctx context.Context, recs []picomq.AppendRecord) error

// benchTarget is one system under load.
type benchTarget interface {
	protocol() string
	// setup creates the streams (the topic and its partitions).
	setup(ctx context.Context) error
	// producer returns producer i's append.
	producer(i int) (appendFunc, error)
	// consume reads stream i mod streams from its start, passing every
	// record's body to deliver: until ctx ends when live, else up to
	// the end the stream had when consume was called.
	consume(ctx context.Context, i int, live bool, deliver func(body []byte)) error
	// teardown deletes what setup created (unless --keep) and closes.
	teardown(ctx context.Context, keep bool) error
}

// httpTarget is a node over Pico HTTP or Durable Streams.
type httpTarget struct {
	c       picomq.Client
	cfg     benchConfig
	ct      string
	streams []picomq.Stream
}

func (t *httpTarget) protocol() string { return t.c.Protocol().String() }

func (t *httpTarget) setup(ctx context.Context) error {
	t.streams = make([]picomq.Stream, t.cfg.streams)
	for i := range t.streams {
		t.streams[i] = t.c.Stream(fmt.Sprintf("%s/%d", t.cfg.prefix, i))
		if _, err := t.streams[i].Create(ctx, t.ct, 0); err != nil {
			return fmt.Errorf("create %s: %w", t.streams[i].Name(), err)
		}
	}
	return nil
}

func (t *httpTarget) producer(i int) (appendFunc, error) {
	s := t.streams[i%len(t.streams)]
	return func(ctx context.Context, recs []picomq.AppendRecord) error {
		_, err := s.Append(ctx, recs...)
		return err
	}, nil
}

func (t *httpTarget) consume(ctx context.Context, i int, live bool, deliver func([]byte)) error {
	s := t.streams[i%len(t.streams)]
	if !live {
		it := s.Records(t.c.Beginning(), picomq.RecordsOptions{})
		for it.Next(ctx) {
			deliver(it.Record().Body)
		}
		return it.Err()
	}
	sub, err := s.Subscribe(ctx, t.c.Beginning(), picomq.SubscribeOptions{})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", s.Name(), err)
	}
	defer sub.Close()
	for ev := range sub.Events() {
		for _, r := range ev.Records {
			deliver(r.Body)
		}
	}
	if err := sub.Err(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

func (t *httpTarget) teardown(ctx context.Context, keep bool) error {
	defer t.c.Close()
	if keep {
		return nil
	}
	var errs []error
	for _, s := range t.streams {
		if err := s.Delete(ctx); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// kafkaTarget is a node's Kafka listener: one topic of --streams
// partitions, produced to with acks=all by idempotent franz-go clients
// (one per producer, no compression).
type kafkaTarget struct {
	addr    string
	cfg     benchConfig
	topic   string
	admin   *kgo.Client
	clients []*kgo.Client
}

// kafkaTopic names the topic after the prefix: "/bench/123" is
// "bench.123".
func kafkaTopic(prefix string) string {
	return strings.ReplaceAll(strings.TrimPrefix(prefix, "/"), "/", ".")
}

func (t *kafkaTarget) protocol() string { return "kafka" }

func (t *kafkaTarget) setup(ctx context.Context) error {
	var err error
	if t.admin, err = kgo.NewClient(kgo.SeedBrokers(t.addr)); err != nil {
		return err
	}
	t.topic = kafkaTopic(t.cfg.prefix)
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t.topic, int32(t.cfg.streams), 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.admin)
	if err == nil {
		err = kerr(resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage)
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", t.topic, err)
	}
	return nil
}

func kerr(code int16, msg *string) error {
	if code == 0 {
		return nil
	}
	if msg != nil {
		return fmt.Errorf("kafka error code %d: %s", code, *msg)
	}
	return fmt.Errorf("kafka error code %d", code)
}

func (t *kafkaTarget) producer(i int) (appendFunc, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.addr), kgo.DefaultProduceTopic(t.topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(16<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	t.clients = append(t.clients, cl)
	part := int32(i % t.cfg.streams)
	krecs := make([]*kgo.Record, t.cfg.batch)
	return func(ctx context.Context, recs []picomq.AppendRecord) error {
		for j := range recs {
			krecs[j] = &kgo.Record{Value: recs[j].Body, Partition: part}
		}
		return cl.ProduceSync(ctx, krecs...).FirstErr()
	}, nil
}

func (t *kafkaTarget) consume(ctx context.Context, i int, live bool, deliver func([]byte)) error {
	part := int32(i % t.cfg.streams)
	end := int64(-1)
	if !live {
		var err error
		if end, err = t.endOffset(ctx, part); err != nil {
			return err
		}
		if end == 0 {
			return nil
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(t.addr), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: {part: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil && ctx.Err() == nil {
			return err
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			deliver(r.Value)
			done = done || (end >= 0 && r.Offset+1 >= end)
		})
		if done {
			return nil
		}
	}
	if !live {
		return ctx.Err()
	}
	return nil
}

// endOffset is the partition's high watermark (ListOffsets, latest).
func (t *kafkaTarget) endOffset(ctx context.Context, part int32) (int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = t.topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = part, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.admin)
	if err != nil {
		return 0, fmt.Errorf("list offsets: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("list offsets: unexpected answer %+v", resp.Topics)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr(p.ErrorCode, nil)
}

func (t *kafkaTarget) teardown(ctx context.Context, keep bool) error {
	for _, cl := range t.clients {
		cl.Close()
	}
	if t.admin == nil {
		return nil
	}
	defer t.admin.Close()
	if keep {
		return nil
	}
	req := kmsg.NewPtrDeleteTopicsRequest()
	rt := kmsg.NewDeleteTopicsRequestTopic()
	rt.Topic = kmsgString(t.topic)
	req.Topics = append(req.Topics, rt)
	req.TopicNames = append(req.TopicNames, t.topic)
	resp, err := req.RequestWith(ctx, t.admin)
	if err == nil && len(resp.Topics) > 0 {
		err = kerr(resp.Topics[0].ErrorCode, resp.Topics[0].ErrorMessage)
	}
	if err != nil {
		return fmt.Errorf("delete topic %s: %w", t.topic, err)
	}
	return nil
}

func kmsgString(s string) *string { return &s }
