package e2e

import (
	"net/http"
	"testing"
)

// h2cClient speaks cleartext HTTP/2 with prior knowledge only, so a reply
// proves the listener accepts h2c.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

// TestH2COnLoopback: a loopback listener speaks h2c by default, and not
// with --h2c=false.
func TestH2COnLoopback(t *testing.T) {
	p := startNode(t, t.TempDir())
	resp, err := h2cClient().Get(p.URL + "/healthz")
	if err != nil {
		t.Fatalf("h2c request: %v", err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("h2c: %s %d", resp.Proto, resp.StatusCode)
	}

	off := startNode(t, t.TempDir(), "--h2c=false")
	if resp, err := h2cClient().Get(off.URL + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("--h2c=false still answered HTTP/2 prior knowledge: %s", resp.Proto)
	}
}
