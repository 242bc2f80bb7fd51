package e2e

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rs256JWT is a compact JWS of claims signed RS256 with key, header kid.
func rs256JWT(t *testing.T, key *rsa.PrivateKey, kid, claims string) string {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	input := enc([]byte(fmt.Sprintf(`{"alg":"RS256","kid":%q,"typ":"JWT"}`, kid))) + "." + enc([]byte(claims))
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + enc(sig)
}

// TestKafkaOAuthJWKS: a node with --auth-tokens and --kafka-oauth-jwks
// takes a JWT signed by a key of the JWK Set file over SASL OAUTHBEARER:
// a token with write and read scopes on its topic produces and consumes
// it; the scope claim is enforced (a read-only token's produce is
// TOPIC_AUTHORIZATION_FAILED); a token signed by another key, or expired,
// fails with SASL_AUTHENTICATION_FAILED and invalid_token. A node given
// --kafka-oauth-jwks without --auth-tokens does not start.
func TestKafkaOAuthJWKS(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	enc := base64.RawURLEncoding.EncodeToString
	jwks := filepath.Join(dir, "jwks.json")
	set := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"k1","use":"sig","alg":"RS256","n":%q,"e":%q}]}`,
		enc(key.N.Bytes()), enc(big.NewInt(int64(key.E)).Bytes()))
	if err := os.WriteFile(jwks, []byte(set), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	_, addr := startKafkaNode(t, filepath.Join(dir, "data"), "--auth-tokens", tokens, "--kafka-oauth-jwks", jwks)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	createTopic(t, ctx, addr, "jwt-orders", 1, plainSASL(rootToken))

	exp := time.Now().Add(time.Hour).Unix()
	rw := rs256JWT(t, key, "k1", fmt.Sprintf(`{"sub":"orders-svc","exp":%d,"scope":"openid write:/jwt-orders read:/jwt-orders"}`, exp))
	if err := kafkaRoundTrip(ctx, addr, "jwt-orders", "signed", oauthSASL(rw)); err != nil {
		t.Fatalf("RS256 token with write and read scopes: %v", err)
	}
	ro := rs256JWT(t, key, "k1", fmt.Sprintf(`{"sub":"reader","exp":%d,"scope":"read:/jwt-orders"}`, exp))
	cl := kafkaClient(t, kgo.SeedBrokers(addr), oauthSASL(ro), kgo.RecordRetries(1))
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "jwt-orders", Value: []byte("no")}).FirstErr()
	cl.Close()
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("read-only token produced: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	for desc, tok := range map[string]string{
		"signed by another key": rs256JWT(t, other, "k1", fmt.Sprintf(`{"sub":"x","exp":%d,"scope":"admin:/"}`, exp)),
		"expired":               rs256JWT(t, key, "k1", fmt.Sprintf(`{"sub":"x","exp":%d,"scope":"admin:/"}`, time.Now().Add(-time.Minute).Unix())),
	} {
		cl := kafkaClient(t, kgo.SeedBrokers(addr), oauthSASL(tok))
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(wctx, cl)
		wcancel()
		cl.Close()
		if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "invalid_token") {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED with invalid_token", desc, err)
		}
	}

	// Refused before anything listens; the context bounds a node that
	// would start anyway.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	out, err := exec.CommandContext(sctx, picomqBin, "serve", "--data-dir", filepath.Join(dir, "data2"), "--kafka-oauth-jwks", jwks,
		"--http-addr", freeAddr(t), "--kafka-addr", freeAddr(t)).CombinedOutput()
	if err == nil || sctx.Err() != nil || !strings.Contains(string(out), "--auth-tokens") {
		t.Fatalf("--kafka-oauth-jwks without --auth-tokens: %v\n%s", err, out)
	}
}
