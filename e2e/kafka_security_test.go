package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// kafkaRoundTrip produces one record to topic with the client options and
// consumes it back; it returns the first error.
func kafkaRoundTrip(ctx context.Context, addr, topic, value string, opts ...kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(1), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr(); err != nil {
		return err
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			return fe.Err
		}
		for _, r := range fs.Records() {
			if string(r.Value) == value {
				return nil
			}
		}
	}
}

func plainSASL(token string) kgo.Opt {
	return kgo.SASL(plain.Auth{User: "any", Pass: token}.AsMechanism())
}

func oauthSASL(token string) kgo.Opt {
	return kgo.SASL(oauth.Auth{Token: token}.AsMechanism())
}

// TestKafkaSASL: the Kafka listener takes the same tokens as HTTP, as the
// SASL PLAIN password or the OAUTHBEARER token; a wrong token fails with
// SASL_AUTHENTICATION_FAILED, and requests other than ApiVersions and
// SaslHandshake before authentication are refused.
func TestKafkaSASL(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	_, kafkaAddr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens, "--kafka-auto-create-topics")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, mech := range []struct {
		name string
		opt  func(string) kgo.Opt
	}{{"PLAIN", plainSASL}, {"OAUTHBEARER", oauthSASL}} {
		// One request, so the client's retries do not hide the error.
		cl := kafkaClient(t, kgo.SeedBrokers(kafkaAddr), mech.opt("tok-wrong-0123456789"))
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(wctx, cl)
		wcancel()
		cl.Close()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s with a wrong token: %v, want SASL_AUTHENTICATION_FAILED", mech.name, err)
		}
		if err := kafkaRoundTrip(ctx, kafkaAddr, "t-"+strings.ToLower(mech.name), "hello "+mech.name, mech.opt(rootToken)); err != nil {
			t.Fatalf("%s with a valid token: %v", mech.name, err)
		}
	}

	// Raw connection: ApiVersions is answered, Metadata before SASL closes
	// the connection without an answer.
	c, err := net.Dial("tcp", kafkaAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw"))
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 0
	if _, err := c.Write(f.AppendRequest(nil, av, 1)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if _, err := readKafkaFrame(br); err != nil {
		t.Fatalf("ApiVersions before SASL not answered: %v", err)
	}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	if _, err := c.Write(f.AppendRequest(nil, md, 2)); err != nil {
		t.Fatal(err)
	}
	if b, err := readKafkaFrame(br); err == nil {
		t.Fatalf("Metadata before SASL answered (%d bytes)", len(b))
	}
}

func readKafkaFrame(r *bufio.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

// TestKafkaTLS: with --tls-cert the Kafka listener speaks TLS (CA made in
// the test) with SASL on top; a plaintext client gets nothing.
func TestKafkaTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	kafkaAddr := freeAddr(t)
	startTLSNode(t, ca, dir, "--auth-tokens", tokens, "--kafka-addr", kafkaAddr, "--kafka-auto-create-topics")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := kafkaRoundTrip(ctx, kafkaAddr, "tls-topic", "over tls", plainSASL(rootToken),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool})); err != nil {
		t.Fatalf("Kafka over TLS: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if err := kafkaRoundTrip(pctx, kafkaAddr, "tls-topic", "plaintext", plainSASL(rootToken)); err == nil {
		t.Fatal("plaintext Kafka client served on the TLS listener")
	}
}

var _ sasl.Mechanism = plain.Auth{}.AsMechanism()

// TestKafkaGroupScopes: committed offsets are guarded by the topics'
// scopes. A token with read on one topic's streams commits, fetches and
// deletes that topic's offsets in a group; for another topic it gets
// TOPIC_AUTHORIZATION_FAILED, nothing is written, OffsetFetch of every
// offset leaves that topic out, and DeleteGroups (admin on the group's
// offsets stream) is GROUP_AUTHORIZATION_FAILED.
func TestKafkaGroupScopes(t *testing.T) {
	dir := t.TempDir()
	const consumerToken = "tok-consumer-0123456789"
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), append(matrixTokens,
		testToken{name: "consumer", secret: consumerToken, scopes: []string{"read:/mine"}})...)
	_, addr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := func(token string) *kgo.Client {
		cl := kafkaClient(t, kgo.SeedBrokers(addr), plainSASL(token))
		t.Cleanup(cl.Close)
		return cl
	}
	root, consumer := client(rootToken), client(consumerToken)
	for _, topic := range []string{"mine", "theirs"} {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 2, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, root)
		if err != nil || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("create %s: %v %+v", topic, err, resp)
		}
	}
	const group = "scoped"
	commit := func(cl *kgo.Client, offsets map[string]int64) map[string]int16 {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation = group, -1
		for topic, off := range offsets {
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = topic
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = 0, off
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("OffsetCommit: %v", err)
		}
		out := map[string]int16{}
		for _, rt := range resp.Topics {
			out[rt.Topic] = rt.Partitions[0].ErrorCode
		}
		return out
	}
	// fetch returns topic -> partition 0's offset (or error code as -100-code).
	fetch := func(cl *kgo.Client, topics ...string) map[string]int64 {
		t.Helper()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		for _, topic := range topics {
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic, rt.Partitions = topic, []int32{0}
			req.Topics = append(req.Topics, rt)
		}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("OffsetFetch: %v %+v", err, resp)
		}
		out := map[string]int64{}
		for _, rt := range resp.Topics {
			for _, rp := range rt.Partitions {
				if rp.Partition != 0 {
					continue
				}
				if rp.ErrorCode != 0 {
					out[rt.Topic] = -100 - int64(rp.ErrorCode)
				} else {
					out[rt.Topic] = rp.Offset
				}
			}
		}
		return out
	}
	denied := -100 - int64(kerr.TopicAuthorizationFailed.Code)

	if got := commit(root, map[string]int64{"theirs": 7}); got["theirs"] != 0 {
		t.Fatalf("root commit: %v", got)
	}
	got := commit(consumer, map[string]int64{"mine": 3, "theirs": 99})
	if got["mine"] != 0 || got["theirs"] != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("consumer commit: %v, want mine ok and theirs TOPIC_AUTHORIZATION_FAILED", got)
	}
	if f := fetch(root, "mine", "theirs"); f["mine"] != 3 || f["theirs"] != 7 {
		t.Fatalf("root fetch: %v, want mine 3, theirs 7 (the consumer's commit of theirs must not land)", f)
	}
	if f := fetch(consumer, "mine", "theirs"); f["mine"] != 3 || f["theirs"] != denied {
		t.Fatalf("consumer fetch: %v, want mine 3 and theirs TOPIC_AUTHORIZATION_FAILED", f)
	}
	if f := fetch(consumer); len(f) != 1 || f["mine"] != 3 {
		t.Fatalf("consumer fetch of every offset: %v, want only mine", f)
	}

	del := kmsg.NewPtrOffsetDeleteRequest()
	del.Group = group
	dt := kmsg.NewOffsetDeleteRequestTopic()
	dt.Topic = "theirs"
	dp := kmsg.NewOffsetDeleteRequestTopicPartition()
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	dresp, err := del.RequestWith(ctx, consumer)
	if err != nil || dresp.ErrorCode != 0 || dresp.Topics[0].Partitions[0].ErrorCode != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("consumer OffsetDelete of theirs: %v %+v, want TOPIC_AUTHORIZATION_FAILED", err, dresp)
	}
	if f := fetch(root, "theirs"); f["theirs"] != 7 {
		t.Fatalf("after the refused OffsetDelete, theirs = %d, want 7", f["theirs"])
	}

	dg := kmsg.NewPtrDeleteGroupsRequest()
	dg.Groups = []string{group}
	dgresp, err := dg.RequestWith(ctx, consumer)
	if err != nil || dgresp.Groups[0].ErrorCode != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("consumer DeleteGroups: %v %+v, want GROUP_AUTHORIZATION_FAILED", err, dgresp)
	}
	if dgresp, err = dg.RequestWith(ctx, root); err != nil || dgresp.Groups[0].ErrorCode != 0 {
		t.Fatalf("root DeleteGroups: %v %+v", err, dgresp)
	}
}
