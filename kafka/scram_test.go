package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/node/stream/streamtest"
)

// memScram is an in-memory credential store: the etcd one is
// meta.ScramStore, tested against etcd there and end to end in e2e.
type memScram struct {
	mu sync.Mutex
	m  map[string]auth.ScramCredential
}

func (s *memScram) GetScram(_ context.Context, mech, user string) (auth.ScramCredential, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.m[mech+"/"+user]
	return c, ok, nil
}

func (s *memScram) PutScram(_ context.Context, mech, user string, c auth.ScramCredential) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]auth.ScramCredential{}
	}
	s.m[mech+"/"+user] = c
	return nil
}

func (s *memScram) DeleteScram(_ context.Context, mech, user string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[mech+"/"+user]
	delete(s.m, mech+"/"+user)
	return ok, nil
}

func (s *memScram) ListScram(context.Context) (map[string]map[string]int, error) {
	return nil, errors.New("not used")
}

func tokenStore(t *testing.T, extra string) *auth.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	file := "tokens:\n  - name: root\n    sha256: " + auth.HashToken("pmq_root-token-0123456789") + "\n    scopes: [\"admin:/\"]\n" + extra
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestSCRAMHandshakeV0: after SaslHandshake v0 the two SCRAM client
// messages come as raw frames and each is answered with a raw frame
// (server-first, then server-final with the signature the client
// checks); a wrong password closes the connection.
func TestSCRAMHandshakeV0(t *testing.T) {
	store := tokenStore(t, "users:\n  - name: alice\n    scopes: [\"read:/\"]\n")
	creds := &memScram{}
	c, err := auth.ScramSHA256.NewCredential("pw", 4096)
	if err != nil {
		t.Fatal(err)
	}
	_ = creds.PutScram(context.Background(), "SCRAM-SHA-256", "alice", c)
	ts := startServer(t, Config{Auth: store, Users: store, Scram: creds})
	for _, tc := range []struct {
		pass string
		ok   bool
	}{{"pw", true}, {"wrong", false}} {
		rc := ts.raw()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(0)
		hs.Mechanism = "SCRAM-SHA-256"
		if r := rc.roundTrip(hs, 1).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
			t.Fatalf("handshake v0: error %d", r.ErrorCode)
		}
		sess, msg, err := scram.Auth{User: "alice", Pass: tc.pass}.AsSha256Mechanism().Authenticate(context.Background(), ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		var closed bool
		for done := false; !done; {
			if _, err := rc.c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
				t.Fatal(err)
			}
			_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
			var hdr [4]byte
			if _, err := io.ReadFull(rc.r, hdr[:]); err != nil {
				closed = true
				break
			}
			in := make([]byte, binary.BigEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(rc.r, in); err != nil {
				t.Fatal(err)
			}
			if done, msg, err = sess.Challenge(in); err != nil {
				t.Fatalf("client refused the server's answer %q: %v", in, err)
			}
		}
		if closed != !tc.ok {
			t.Fatalf("password %q: connection closed = %v", tc.pass, closed)
		}
		if tc.ok {
			md := kmsg.NewPtrMetadataRequest()
			md.SetVersion(1)
			if r := rc.roundTrip(md, 2).(*kmsg.MetadataResponse); len(r.Brokers) != 1 {
				t.Fatalf("metadata after SCRAM: %+v", r.Brokers)
			}
		}
	}
}

// TestInternalIdentity: nodes reach each other's listeners that require
// SASL as the internal SCRAM user, whose password is the cluster secret
// (the peer client of WriteTxnMarkers). Without the secret, or with
// another one, the listener refuses them; the internal user cannot be
// created through AlterUserScramCredentials.
func TestInternalIdentity(t *testing.T) {
	store := tokenStore(t, "")
	ts := startServer(t, Config{Auth: store, Users: store, Scram: &memScram{}, ClusterSecret: "cluster-secret-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	writeMarkers := func(secret string) error {
		return peerMarker(ctx, &peerClients{secret: secret}, ts.addr)
	}
	// Answered: the topic does not exist (an authorization failure or a
	// closed connection otherwise).
	if err := writeMarkers("cluster-secret-1"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("with the cluster secret: %v (want the marker answered, UNKNOWN_TOPIC_OR_PARTITION)", err)
	}
	if err := writeMarkers("another-secret"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("with another secret: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if err := writeMarkers(""); err == nil {
		t.Fatal("without SASL: marker answered")
	}

	cl := ts.client(kgo.SASL(scram.Auth{User: internalUser, Pass: "cluster-secret-1"}.AsSha512Mechanism()))
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	up := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
	up.Name, up.Mechanism, up.Iterations, up.Salt, up.SaltedPassword = internalUser, 2, 4096, []byte("salt"), make([]byte, 64)
	req.Upsertions = append(req.Upsertions, up)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.Results[0].ErrorCode; c != kerr.UnacceptableCredential.Code {
		t.Fatalf("upserting the internal user: error %d, want UNACCEPTABLE_CREDENTIAL", c)
	}
}

// peerMarker sends one commit marker for a topic that does not exist
// through pc to addr: UNKNOWN_TOPIC_OR_PARTITION means the node answered.
func peerMarker(ctx context.Context, pc *peerClients, addr string) error {
	defer pc.close()
	cl, err := pc.client(addr)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	mk := kmsg.NewWriteTxnMarkersRequestMarker()
	mk.ProducerID, mk.ProducerEpoch, mk.Committed = 1, 0, true
	mt := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
	mt.Topic, mt.Partitions = "no-such-topic", []int32{0}
	mk.Topics = []kmsg.WriteTxnMarkersRequestMarkerTopic{mt}
	req.Markers = []kmsg.WriteTxnMarkersRequestMarker{mk}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(rctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Markers[0].Topics[0].Partitions[0].ErrorCode)
}

// TestPeerTLS: node-to-node calls speak TLS to listeners that do, and
// verify the peer's certificate against the roots they are given.
func TestPeerTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	store := tokenStore(t, "")
	env := streamtest.New(t, stream.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(env.Svc, Config{Auth: store, Users: store, Scram: &memScram{}, ClusterSecret: "secret-1",
		AdvertiseAddr: ln.Addr().String(), ClusterID: "c", Logger: quiet})
	done := make(chan error, 1)
	go func() {
		done <- srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}))
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Close(ctx)
		<-done
	})
	ctx := context.Background()
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	if err := peerMarker(ctx, &peerClients{secret: "secret-1", tls: &tls.Config{RootCAs: pool}}, ln.Addr().String()); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("over TLS: %v, want the marker answered (UNKNOWN_TOPIC_OR_PARTITION)", err)
	}
	if err := peerMarker(ctx, &peerClients{secret: "secret-1", tls: &tls.Config{RootCAs: x509.NewCertPool()}}, ln.Addr().String()); err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("a certificate outside the roots: %v, want a TLS failure", err)
	}
	if err := peerMarker(ctx, &peerClients{secret: "secret-1"}, ln.Addr().String()); err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("plaintext to a TLS listener: %v, want a failure", err)
	}
}
