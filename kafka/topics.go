package kafka

// Topics, partitions and brokers as Kafka clients see them, over streams
// and nodes (docs/kafka.md, "Topics and partitions"):
//
//   - A topic is the stream whose Kafka topic alias it is (registry topic
//     index): partition 0 is that stream itself, so a single-partition topic
//     is exactly the stream the alias names. Partition p >= 1 is the stream
//     "<partition 0's name>/<p>" (no alias of its own). The partition count
//     is the number of those that exist consecutively from 1.
//   - The topic id is derived from partition 0's stream id (unique forever),
//     so it is stable across nodes and restarts and new when a topic is
//     re-created.
//   - Brokers are the live nodes with a Kafka listener; a node's broker id
//     is a hash of its node id. A partition's leader is the node serving
//     its stream and the leader epoch is the stream's ownership epoch.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/PicoMQ/picomq/kafka/group"
	"github.com/PicoMQ/picomq/node/stream"
)

// kafkaContentType is the content type of streams created by CreateTopics
// and auto-creation: Kafka values are opaque bytes.
const kafkaContentType = "application/octet-stream"

// partitionStream names partition p of a topic whose partition 0 is base.
func partitionStream(base string, p int32) string {
	if p == 0 {
		return base
	}
	return base + "/" + strconv.Itoa(int(p))
}

// topicStream is the stream CreateTopics creates for a new topic.
func topicStream(topic string) string { return "/" + topic }

// topicID derives a topic's UUID from its partition-0 stream id.
func topicID(streamID uint64) [16]byte {
	sum := sha256.Sum256([]byte("picomq kafka topic " + strconv.FormatUint(streamID, 10)))
	var id [16]byte
	copy(id[:], sum[:16])
	return id
}

// brokerID is the Kafka broker id of a node: a non-negative hash of its id,
// the same on every node.
func brokerID(nodeID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(nodeID))
	return int32(h.Sum32() & 0x7fffffff)
}

// topic is one topic resolved from the registry.
type topic struct {
	name       string
	id         [16]byte
	partitions []stream.Info // index = partition; [0] carries the alias
}

// resolveTopic reads a topic's streams from the registry (not from a cache:
// every node must agree right after CreateTopics returns).
func (s *Server) resolveTopic(ctx context.Context, name string) (topic, error) {
	base, err := s.svc.LookupTopic(ctx, name)
	if err != nil {
		return topic{}, err
	}
	return s.resolveTopicFrom(ctx, name, base)
}

// resolveTopicFrom is resolveTopic when partition 0 is already known.
func (s *Server) resolveTopicFrom(ctx context.Context, name string, base stream.Info) (topic, error) {
	subs, err := s.listAll(ctx, base.Name+"/")
	if err != nil {
		return topic{}, err
	}
	t := topicFrom(name, base, subs)
	s.topics.put(t)
	return t, nil
}

// topicFrom assembles a topic from partition 0 and the streams under it.
func topicFrom(name string, base stream.Info, subs []stream.Info) topic {
	byName := make(map[string]stream.Info, len(subs))
	for _, in := range subs {
		byName[in.Name] = in
	}
	t := topic{name: name, id: topicID(base.ID), partitions: []stream.Info{base}}
	for p := int32(1); ; p++ {
		in, ok := byName[partitionStream(base.Name, p)]
		if !ok || in.KafkaTopic != "" {
			break
		}
		t.partitions = append(t.partitions, in)
	}
	return t
}

// allTopics lists every topic in one pass over the registry.
func (s *Server) allTopics(ctx context.Context) ([]topic, error) {
	all, err := s.listAll(ctx, "/")
	if err != nil {
		return nil, err
	}
	var out []topic
	for i, in := range all {
		if in.KafkaTopic == "" {
			continue
		}
		// Partition streams sort right after their base ("/t" < "/t/1").
		j := i + 1
		for j < len(all) && len(all[j].Name) > len(in.Name) && all[j].Name[:len(in.Name)+1] == in.Name+"/" {
			j++
		}
		t := topicFrom(in.KafkaTopic, in, all[i+1:j])
		out = append(out, t)
		s.topics.put(t)
	}
	return out, nil
}

// listAll lists every stream whose name starts with prefix.
func (s *Server) listAll(ctx context.Context, prefix string) ([]stream.Info, error) {
	var out []stream.Info
	after := ""
	for range 10000 { // bounded: 10 million streams
		page, more, err := s.svc.List(ctx, prefix, after, 1000)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if !more || len(page) == 0 {
			return out, nil
		}
		after = page[len(page)-1].Name
	}
	return nil, fmt.Errorf("%w: listing %q did not end", stream.ErrUnavailable, prefix)
}

// topicCache remembers where a topic's partitions are, for the produce and
// fetch paths, which must not read the registry per request. An entry is
// only a name hint: the stream service checks everything, and a stale hint
// (topic deleted, partitions added) is refreshed when the service says
// the stream is not there or the partition is beyond the known count.
type topicCache struct {
	mu sync.Mutex
	m  map[string]cachedTopic
}

type cachedTopic struct {
	base       string
	partitions int32
	maxBatch   int64 // the topic's max.message.bytes (0 = default)
	at         time.Time
}

// topicCacheTTL bounds how long a hint is used without a registry read, so
// an alias moved to another stream over HTTP is followed soon.
const topicCacheTTL = 5 * time.Second

func newTopicCache() *topicCache { return &topicCache{m: map[string]cachedTopic{}} }

func (c *topicCache) put(t topic) {
	c.mu.Lock()
	c.m[t.name] = cachedTopic{base: t.partitions[0].Name, partitions: int32(len(t.partitions)),
		maxBatch: t.partitions[0].MaxBatchBytes, at: time.Now()}
	c.mu.Unlock()
}

func (c *topicCache) get(name string) (cachedTopic, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[name]
	if ok && time.Since(e.at) > topicCacheTTL {
		delete(c.m, name)
		return cachedTopic{}, false
	}
	return e, ok
}

// maxBatch is a topic's max.message.bytes: its own (topicMax > 0) or the
// server's default def.
func maxBatch(topicMax int64, def int32) int {
	if topicMax > 0 {
		return int(topicMax)
	}
	return int(def)
}

// forgetAll drops every hint (a forwarded config change names a stream,
// not its topic).
func (c *topicCache) forgetAll() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

func (c *topicCache) forget(name string) {
	c.mu.Lock()
	delete(c.m, name)
	c.mu.Unlock()
}

// partitionName finds the stream of a topic partition, from the cache or
// the registry; create says whether an unknown topic may be auto-created.
func (s *Server) partitionName(ctx context.Context, name string, p int32, create bool) (string, error) {
	n, _, err := s.locatePartition(ctx, name, p, create)
	return n, err
}

// locatePartition is partitionName that also returns the topic's own
// max.message.bytes (0 = default), found in the same cache entry or
// registry read.
func (s *Server) locatePartition(ctx context.Context, name string, p int32, create bool) (string, int64, error) {
	if p < 0 {
		return "", 0, fmt.Errorf("%w: partition %d", stream.ErrNotFound, p)
	}
	if e, ok := s.topics.get(name); ok && p < e.partitions {
		return partitionStream(e.base, p), e.maxBatch, nil
	}
	t, err := s.resolveTopic(ctx, name)
	if errors.Is(err, stream.ErrNotFound) && create && s.cfg.AutoCreateTopics {
		t, err = s.createTopic(ctx, name, s.cfg.DefaultPartitions, topicConfig{})
		if errors.Is(err, stream.ErrConflict) || errors.Is(err, stream.ErrTopicConflict) {
			t, err = s.resolveTopic(ctx, name) // created concurrently
		}
	}
	if err != nil {
		return "", 0, err
	}
	if int(p) >= len(t.partitions) {
		return "", 0, fmt.Errorf("%w: topic %q has %d partitions, not %d", stream.ErrNotFound, name, len(t.partitions), p+1)
	}
	return partitionStream(t.partitions[0].Name, p), t.partitions[0].MaxBatchBytes, nil
}

// brokers are the live nodes with a Kafka listener, by broker id.
type brokers struct {
	members []stream.Member
	byNode  map[string]group.Broker
	self    string
}

func (s *Server) brokers(ctx context.Context) (brokers, error) {
	ms, err := s.svc.Members(ctx)
	if err != nil {
		return brokers{}, err
	}
	b := brokers{members: ms, byNode: map[string]group.Broker{}, self: s.svc.NodeID()}
	for _, m := range ms {
		if m.KafkaAddr == "" && m.NodeID == b.self {
			m.KafkaAddr = s.cfg.AdvertiseAddr
		}
		host, port, err := net.SplitHostPort(m.KafkaAddr)
		if err != nil {
			continue // no Kafka listener on that node
		}
		pn, err := strconv.ParseInt(port, 10, 32)
		if err != nil {
			continue
		}
		b.byNode[m.NodeID] = group.Broker{NodeID: brokerID(m.NodeID), Host: host, Port: int32(pn)}
	}
	return b, nil
}

// leader is the broker id serving a partition's stream, or -1 if that node
// has no Kafka listener.
func (s *Server) leader(b brokers, in stream.Info) int32 {
	if br, ok := b.byNode[s.svc.ServingNode(in, b.members)]; ok {
		return br.NodeID
	}
	return -1
}

// controller is the broker every node names as controller: the live
// Kafka node with the smallest node id, so all nodes agree.
func (b brokers) controller() int32 {
	for _, m := range b.members {
		if br, ok := b.byNode[m.NodeID]; ok {
			return br.NodeID
		}
	}
	return -1
}

// Locate implements group.Locator: the broker serving a stream (its owner,
// or who takes it over next; for a stream that does not exist yet, the node
// placement would give it to).
func (s *Server) Locate(ctx context.Context, name string) (group.Broker, bool, error) {
	b, err := s.brokers(ctx)
	if err != nil {
		return group.Broker{}, false, err
	}
	in, err := s.svc.Describe(ctx, name)
	if errors.Is(err, stream.ErrNotFound) {
		in, err = stream.Info{Name: name}, nil
	}
	if err != nil {
		return group.Broker{}, false, err
	}
	node := s.svc.ServingNode(in, b.members)
	br, ok := b.byNode[node]
	if !ok {
		return group.Broker{}, false, fmt.Errorf("%w: node %q serving %s has no Kafka listener", stream.ErrUnavailable, node, name)
	}
	return br, node == b.self, nil
}

// assignableTopics lists every topic for the server-side assignors of
// consumer-protocol groups, __consumer_offsets included (Metadata lists
// it, and a regex subscription matches it in Kafka too).
func (s *Server) assignableTopics(ctx context.Context) ([]group.TopicInfo, error) {
	all, err := s.allTopics(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]group.TopicInfo, 0, len(all)+1)
	for _, t := range all {
		out = append(out, group.TopicInfo{Name: t.name, ID: t.id, Partitions: int32(len(t.partitions))})
	}
	out = append(out, group.TopicInfo{Name: offsetsTopicName, ID: topicID(0), Partitions: 1})
	return out, nil
}
