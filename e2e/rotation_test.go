package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotationWhileConnected: deploy/picomq-refresh.sh (picomq-refresh.timer
// on AWS) fetches a renewed listener certificate and a changed token file
// from "SSM" (a fake AWS CLI serving files), swaps the files and reloads the
// node (SIGHUP, what `systemctl reload picomq` sends). A client connected
// before the rotation keeps its connection and keeps working (a long-poll
// in flight is answered, an append on the same connection with the new
// token is accepted), new handshakes get the new certificate, and a run
// with nothing changed does not reload.
func TestRotationWhileConnected(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	const tokA, tokB = "tok-rotation-a-0123456789", "tok-rotation-b-0123456789"
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), testToken{name: "a", secret: tokA, scopes: []string{"admin:/"}})
	p, certFile, keyFile := startTLSNode(t, ca, dir, "--auth-tokens", tokens)

	// Parameter Store as the fake CLI serves it: one file per parameter.
	ssm := filepath.Join(dir, "ssm")
	if err := os.MkdirAll(ssm, 0o700); err != nil {
		t.Fatal(err)
	}
	param := func(name string) string {
		return filepath.Join(ssm, strings.ReplaceAll(strings.TrimPrefix(name, "/"), "/", "_"))
	}
	copyFile(t, certFile, param("/rot/node.crt"))
	copyFile(t, keyFile, param("/rot/node.key"))
	copyFile(t, tokens, param("/rot/auth-tokens"))
	fakeAWS := filepath.Join(dir, "aws")
	writeExecutable(t, fakeAWS, `#!/bin/bash
# aws ssm get-parameter ... --name NAME ...: the file of NAME under $SSM_DIR.
while [ $# -gt 0 ]; do
  if [ "$1" = --name ]; then n="${2#/}"; exec cat "$SSM_DIR/${n//\//_}"; fi
  shift
done
exit 1
`)
	list := filepath.Join(dir, "refresh.list")
	writeExecutable(t, list, fmt.Sprintf("/rot/node.crt %s\n/rot/node.key %s\n/rot/auth-tokens %s\n", certFile, keyFile, tokens))
	refresh := func() string {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join("..", "deploy", "picomq-refresh.sh"))
		cmd.Env = append(os.Environ(), "SSM_DIR="+ssm, "AWS_CLI="+fakeAWS, "PICOMQ_REFRESH_LIST="+list,
			"PICOMQ_GROUP=picomq-test-nobody", fmt.Sprintf("PICOMQ_RELOAD=kill -HUP %d", p.Cmd.Process.Pid))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("picomq-refresh: %v\n%s", err, out)
		}
		return string(out)
	}
	reloads := func() int { return strings.Count(p.logs.String(), "TLS certificate reloaded") }

	if out := refresh(); !strings.Contains(out, "unchanged") || strings.Contains(out, "reloading") {
		t.Fatalf("refresh with nothing changed: %s", out)
	}

	// A client connected before the rotation, with a long-poll in flight.
	c := ca.client()
	send := func(method, path, tok string, body []byte) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, p.URL+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != nil || method == "PUT" {
			req.Header.Set("Content-Type", "text/plain")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	resp := send("PUT", "/rot/s", tokA, nil)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 100 {
		t.Fatalf("create: %d, serial %v", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber)
	}
	polled := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("GET", p.URL+"/rot/s?offset=0&live=long-poll", nil)
		req.Header.Set("Authorization", "Bearer "+tokA)
		resp, err := c.Do(req)
		if err != nil {
			polled <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		polled <- fmt.Sprintf("%d %s", resp.StatusCode, b)
	}()

	// Rotation in "SSM": a renewed certificate, a token file with a second
	// token beside the first (the overlap of a token rotation).
	ca.issue(t, 200, param("/rot/node.crt"), param("/rot/node.key"))
	writeTokenFile(t, param("/rot/auth-tokens"),
		testToken{name: "a", secret: tokA, scopes: []string{"admin:/"}}, testToken{name: "b", secret: tokB, scopes: []string{"admin:/"}})
	before := reloads()
	if out := refresh(); !strings.Contains(out, "updated") || !strings.Contains(out, "reloading") {
		t.Fatalf("refresh after the rotation: %s", out)
	}
	if !pollUntil(20*time.Second, 20*time.Millisecond, func() bool { return reloads() > before }) {
		t.Fatalf("node did not reload after picomq-refresh\n%s", p.logs.String())
	}

	// The connected client: same connection (old certificate), new token.
	resp = send("POST", "/rot/s", tokB, []byte("after rotation"))
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 204 {
		t.Fatalf("append with the new token on the open connection: %d", resp.StatusCode)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 100 {
		t.Errorf("the open connection was replaced (serial %d): the test no longer proves it survives", got)
	}
	select {
	case got := <-polled:
		if !strings.HasPrefix(got, "200") || !strings.Contains(got, "after rotation") {
			t.Fatalf("long-poll in flight across the reload: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long-poll in flight across the reload never answered")
	}

	// A new handshake sees the renewed certificate; the new token works there.
	fresh := ca.client()
	req, _ := http.NewRequest("GET", p.URL+"/rot/s?offset=0", nil)
	req.Header.Set("Authorization", "Bearer "+tokB)
	r2, err := fresh.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 200 || r2.TLS.PeerCertificates[0].SerialNumber.Int64() != 200 {
		t.Fatalf("new connection: %d, serial %v, want 200 and serial 200", r2.StatusCode, r2.TLS.PeerCertificates[0].SerialNumber)
	}

	// Nothing changed since: no reload.
	before = reloads()
	if out := refresh(); !strings.Contains(out, "unchanged") || strings.Contains(out, "reloading") {
		t.Fatalf("second refresh: %s", out)
	}
	if reloads() != before {
		t.Fatal("an unchanged refresh reloaded the node")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeExecutable(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o700); err != nil {
		t.Fatal(err)
	}
}
