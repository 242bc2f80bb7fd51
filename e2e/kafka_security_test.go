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
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), mech.opt("tok-wrong-0123456789"))
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(wctx, cl)
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
