package stream

// Kafka topic aliases. A stream may carry one Kafka topic name, unique
// across the registry (meta keeps a topic index updated in the same etcd
// transaction as the stream record). At create the alias is either asked
// for explicitly (Pico-Kafka-Topic, a Kafka CreateTopics call) or derived
// from the stream name by turning slashes into dots, if the result is a
// legal Kafka topic name and no other stream holds it. An explicit alias
// that is taken is a conflict; a derived one that is taken is simply not
// set, so creating /a/b never fails because some stream is aliased "a.b".

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/PicoMQ/picomq/meta/metadata"
)

var (
	// ErrTopicConflict: the Kafka topic alias belongs to another stream.
	ErrTopicConflict = errors.New("stream: kafka topic alias belongs to another stream")
	// ErrInvalidTopic: not a legal Kafka topic name, or the stream is one
	// that never carries a topic (reserved names).
	ErrInvalidTopic = errors.New("stream: invalid kafka topic")
)

// MaxTopicLen is Kafka's limit on topic names.
const MaxTopicLen = 249

// ValidateTopic checks a Kafka topic name as Kafka brokers do: 1 to 249
// characters of [a-zA-Z0-9._-], not "." or "..". Names starting with "__"
// are Kafka's internal topics (__consumer_offsets, __transaction_state) and
// are refused too, so a client can never shadow them.
func ValidateTopic(topic string) error {
	switch {
	case topic == "":
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	case len(topic) > MaxTopicLen:
		return fmt.Errorf("%w: %q is longer than %d characters", ErrInvalidTopic, topic, MaxTopicLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("%w: %q", ErrInvalidTopic, topic)
	case strings.HasPrefix(topic, "__"):
		return fmt.Errorf("%w: %q: names starting with \"__\" are Kafka internal topics", ErrInvalidTopic, topic)
	}
	for i := 0; i < len(topic); i++ {
		if !isTopicChar(topic[i]) {
			return fmt.Errorf("%w: %q contains %q (allowed: letters, digits, '.', '_', '-')", ErrInvalidTopic, topic, topic[i])
		}
	}
	return nil
}

func isTopicChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// DeriveTopic returns the alias a stream gets by default: its name without
// the leading slash, slashes turned into dots ("/orders/eu" → "orders.eu"),
// if that is a legal topic name. Reserved streams never get one.
func DeriveTopic(name string) (string, bool) {
	if TopicForbidden(name) || len(name) < 2 {
		return "", false
	}
	t := strings.ReplaceAll(name[1:], "/", ".")
	if ValidateTopic(t) != nil {
		return "", false
	}
	return t, true
}

// TopicForbidden reports whether a stream may never carry a Kafka topic:
// the server's reserved streams (/_sys/…, /_schemas/…, anything under a
// first segment starting with "_").
func TopicForbidden(name string) bool {
	return strings.HasPrefix(name, "/_")
}

// createTopic decides the alias a create asks for: explicit (validated) or
// derived.
func createTopic(name string, opts CreateOptions) (topic string, explicit bool, err error) {
	if opts.KafkaTopic == nil {
		t, _ := DeriveTopic(name)
		return t, false, nil
	}
	t := *opts.KafkaTopic
	if t == "" {
		return "", true, nil // explicitly none
	}
	if TopicForbidden(name) {
		return "", true, fmt.Errorf("%w: %s is reserved and never carries a Kafka topic", ErrInvalidTopic, name)
	}
	if err := ValidateTopic(t); err != nil {
		return "", true, err
	}
	return t, true, nil
}

// createRecord creates the registry record of a new stream with its topic
// alias and retention. A derived alias that another stream holds is
// dropped and the create retried without it; an explicit one is
// ErrTopicConflict. Errors are classified (ErrTopicConflict,
// ErrInvalidTopic, ErrInvalidArgument, ErrUnavailable).
func (s *Service) createRecord(ctx context.Context, m metadata.Stream, opts CreateOptions) (metadata.Stream, bool, error) {
	if opts.RetentionMs < 0 || opts.RetentionBytes < 0 {
		return metadata.Stream{}, false, fmt.Errorf("%w: retention must not be negative", ErrInvalidArgument)
	}
	topic, explicit, err := createTopic(m.Name, opts)
	if err != nil {
		return metadata.Stream{}, false, err
	}
	m.KafkaTopic = topic
	m.RetentionMs, m.RetentionBytes = opts.RetentionMs, opts.RetentionBytes
	m.MaxBatchBytes = max(opts.MaxBatchBytes, 0)
	m.LogAppendTime = opts.LogAppendTime
	m.Compaction = compactionToMeta(opts.Compaction)
	stored, created, err := s.reg.CreateStream(ctx, m)
	if errors.Is(err, metadata.ErrTopicTaken) && !explicit {
		m.KafkaTopic = ""
		stored, created, err = s.reg.CreateStream(ctx, m)
	}
	switch {
	case errors.Is(err, metadata.ErrTopicTaken):
		return metadata.Stream{}, false, fmt.Errorf("%w: %v", ErrTopicConflict, err)
	case err != nil:
		return metadata.Stream{}, false, fmt.Errorf("%w: registry create %q: %v", ErrUnavailable, m.Name, err)
	}
	return stored, created, nil
}

// sameTopicConfig is the part of the identical-config check of a repeated
// create that this file owns: an explicitly asked-for alias and any
// retention given must match what the stream has. Omitted values match
// anything, so a plain re-create of a stream that got a derived alias or a
// later PATCH is still "identical".
func sameTopicConfig(stored metadata.Stream, opts CreateOptions) error {
	if opts.KafkaTopic != nil && *opts.KafkaTopic != stored.KafkaTopic {
		return fmt.Errorf("%w: %s has Kafka topic %q, not %q", ErrConflict, stored.Name, stored.KafkaTopic, *opts.KafkaTopic)
	}
	if opts.RetentionMs != 0 && opts.RetentionMs != stored.RetentionMs {
		return fmt.Errorf("%w: %s has retention %d ms, not %d", ErrConflict, stored.Name, stored.RetentionMs, opts.RetentionMs)
	}
	if opts.RetentionBytes != 0 && opts.RetentionBytes != stored.RetentionBytes {
		return fmt.Errorf("%w: %s has retention %d bytes, not %d", ErrConflict, stored.Name, stored.RetentionBytes, opts.RetentionBytes)
	}
	if opts.Compaction != nil && (stored.Compaction == nil || *compactionToMeta(opts.Compaction) != *stored.Compaction) {
		return fmt.Errorf("%w: %s has other compaction settings", ErrConflict, stored.Name)
	}
	return nil
}
