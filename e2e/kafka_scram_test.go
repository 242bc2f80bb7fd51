package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func scramSASL(mech, user, pass string) kgo.Opt {
	a := scram.Auth{User: user, Pass: pass}
	if mech == "SCRAM-SHA-512" {
		return kgo.SASL(a.AsSha512Mechanism())
	}
	return kgo.SASL(a.AsSha256Mechanism())
}

// upsertScram creates or replaces user's credential for mech through
// AlterUserScramCredentials (kadm salts the password client-side).
func upsertScram(t *testing.T, ctx context.Context, adm *kadm.Client, mech, user, pass string, iterations int32) {
	t.Helper()
	m := kadm.ScramSha256
	if mech == "SCRAM-SHA-512" {
		m = kadm.ScramSha512
	}
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: m, Iterations: iterations, Password: pass}})
	if err != nil {
		t.Fatalf("AlterUserScramCredentials %s %s: %v", user, mech, err)
	}
	if err := res[user].Err; err != nil {
		t.Fatalf("AlterUserScramCredentials %s %s: %v", user, mech, err)
	}
}

// scramPing makes one Metadata request as user; the error is the login's.
func scramPing(ctx context.Context, addr, mech, user, pass string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequestRetries(0), scramSASL(mech, user, pass))
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(pctx, cl)
	return err
}

// TestKafkaSCRAM: SCRAM-SHA-256 and -512 logins against a real node with
// --auth-tokens. A user created with AlterUserScramCredentials (kadm,
// logged in with a token over PLAIN) logs in with franz-go and kcat
// (librdkafka), produces and consumes under the scopes the token file's
// users: list grants; DescribeUserScramCredentials lists its mechanisms;
// a wrong password, an unknown user, a user with a credential but no
// scopes, and a deleted credential are refused with
// SASL_AUTHENTICATION_FAILED.
func TestKafkaSCRAM(t *testing.T) {
	dir := t.TempDir()
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	f, err := os.OpenFile(tokens, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("users:\n  - name: alice\n    scopes: [admin:/scram-]\n")
	f.Close()
	node, addr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens, "--kafka-auto-create-topics")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	root := kafkaClient(t, kgo.SeedBrokers(addr), plainSASL(rootToken))
	defer root.Close()
	adm := kadm.NewClient(root)

	upsertScram(t, ctx, adm, "SCRAM-SHA-256", "alice", "alice-pw-256", 4096)
	upsertScram(t, ctx, adm, "SCRAM-SHA-512", "alice", "alice-pw-512", 8192)
	upsertScram(t, ctx, adm, "SCRAM-SHA-256", "carol", "carol-pw", 4096) // no users: entry

	desc, err := adm.DescribeUserSCRAMs(ctx, "alice")
	if err != nil {
		t.Fatalf("DescribeUserScramCredentials: %v", err)
	}
	d := desc["alice"]
	if d.Err != nil || len(d.CredInfos) != 2 || d.CredInfos[0].Iterations != 4096 || d.CredInfos[1].Iterations != 8192 {
		t.Fatalf("DescribeUserScramCredentials(alice) = %+v", d)
	}
	// A salted password below RFC 7677's iteration minimum is refused.
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "weak", Mechanism: kadm.ScramSha256, Iterations: 1000, Password: "x"}})
	if err != nil || !errors.Is(res["weak"].Err, kerr.UnacceptableCredential) {
		t.Fatalf("1000 iterations: %v %v, want UNACCEPTABLE_CREDENTIAL", err, res["weak"].Err)
	}

	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		pass := "alice-pw-" + strings.TrimPrefix(mech, "SCRAM-SHA-")
		if err := kafkaRoundTrip(ctx, addr, "scram-"+strings.ToLower(mech), "via "+mech, scramSASL(mech, "alice", pass)); err != nil {
			t.Fatalf("franz-go %s as alice: %v", mech, err)
		}
		for _, bad := range []struct{ user, pass, why string }{
			{"alice", "wrong", "wrong password"},
			{"nobody", pass, "unknown user"},
		} {
			if err := scramPing(ctx, addr, mech, bad.user, bad.pass); !errors.Is(err, kerr.SaslAuthenticationFailed) {
				t.Fatalf("franz-go %s, %s: %v, want SASL_AUTHENTICATION_FAILED", mech, bad.why, err)
			}
		}
	}
	if err := scramPing(ctx, addr, "SCRAM-SHA-256", "carol", "carol-pw"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("a user the token file grants nothing: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	// alice's scopes apply: a topic outside admin:/scram- is refused.
	if err := kafkaRoundTrip(ctx, addr, "other", "x", scramSASL("SCRAM-SHA-256", "alice", "alice-pw-256")); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("alice on a topic outside her scopes: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// kcat (librdkafka) with both mechanisms.
	bin := needTool(t, "kcat")
	for _, mech := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
		pass := "alice-pw-" + strings.TrimPrefix(mech, "SCRAM-SHA-")
		topic := "scram-kcat-" + strings.ToLower(mech)
		sasl := []string{"-b", addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech, "-X", "sasl.username=alice"}
		kcat(t, bin, "k1\nk2\n", append(sasl, "-X", "sasl.password="+pass, "-P", "-t", topic)...)
		if out := kcat(t, bin, "", append(sasl, "-X", "sasl.password="+pass, "-C", "-t", topic, "-o", "beginning", "-e")...); out != "k1\nk2\n" {
			t.Fatalf("kcat %s consumed %q", mech, out)
		}
		// A wrong password: librdkafka reports the broker's failure and
		// kcat exits non-zero.
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, bin, append(sasl, "-X", "sasl.password=wrong", "-L", "-m", "10")...)
		var errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &errb, &errb
		err := cmd.Run()
		ccancel()
		if err == nil || !strings.Contains(errb.String(), "SASL authentication error: authentication failed") {
			t.Fatalf("kcat %s with a wrong password: %v\n%s", mech, err, errb.String())
		}
	}

	// Deleting a credential ends that mechanism's logins.
	dres, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "alice", Mechanism: kadm.ScramSha512}}, nil)
	if err != nil || dres["alice"].Err != nil {
		t.Fatalf("delete alice SCRAM-SHA-512: %v %v", err, dres["alice"].Err)
	}
	if err := scramPing(ctx, addr, "SCRAM-SHA-512", "alice", "alice-pw-512"); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("after delete: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	if err := scramPing(ctx, addr, "SCRAM-SHA-256", "alice", "alice-pw-256"); err != nil {
		t.Fatalf("SCRAM-SHA-256 after deleting only -512: %v", err)
	}
	// Only admin:/ may alter credentials.
	alice := kafkaClient(t, kgo.SeedBrokers(addr), scramSASL("SCRAM-SHA-256", "alice", "alice-pw-256"))
	defer alice.Close()
	res, err = kadm.NewClient(alice).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "alice", Mechanism: kadm.ScramSha256, Iterations: 4096, Password: "new"}})
	if err == nil {
		err = res["alice"].Err
	}
	if !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("alice altering credentials: %v, want CLUSTER_AUTHORIZATION_FAILED", err)
	}
	// Logins are counted by mechanism and result.
	m := string(do(t, "GET", node.URL+"/metrics", nil, bearerHdr("tok-scraper-0123456789")...).Body)
	for _, want := range []string{
		`picomq_kafka_sasl_logins_total{mechanism="SCRAM-SHA-256",result="ok"}`,
		`picomq_kafka_sasl_logins_total{mechanism="SCRAM-SHA-512",result="failed"}`,
		`picomq_kafka_sasl_logins_total{mechanism="PLAIN",result="ok"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
