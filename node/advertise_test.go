package node

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// TestAdvertisedHostPort (issue 27, finding 8): a listener bound to an
// unspecified address or port 0 never advertises it; a named host is kept.
func TestAdvertisedHostPort(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 4437}
	for _, listen := range []string{"0.0.0.0:4437", "[::]:4437", ":4437", "0.0.0.0:0"} {
		got, derived := advertisedHostPort(listen, bound)
		host, port, err := net.SplitHostPort(got)
		if err != nil || !derived || port != "4437" {
			t.Fatalf("%s: %q derived=%v", listen, got, derived)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			t.Fatalf("%s: advertises the unspecified host %q", listen, host)
		}
	}
	if got, derived := advertisedHostPort("n1.internal:4437", bound); got != "n1.internal:4437" || derived {
		t.Fatalf("named host: %q derived=%v", got, derived)
	}
	if got, _ := advertisedHostPort("127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}); got != "127.0.0.1:5555" {
		t.Fatalf("port 0: %q", got)
	}
}

// TestAdvertiseIsTheBoundAddress: with port 0 the node advertises the
// port it got (it advertised ":0" before), on both listeners, and an
// explicit --advertise-url is kept as is.
func TestAdvertiseIsTheBoundAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startTestNode(t, ctx, t.TempDir(), nil, "--kafka-addr", "127.0.0.1:0")
	shutdownAtEnd(t, n)
	u, err := url.Parse(n.cfg.AdvertiseURL)
	if err != nil || u.Host != n.Addr() {
		t.Fatalf("advertise URL %q, bound %s", n.cfg.AdvertiseURL, n.Addr())
	}
	if n.kafkaAdvertise != n.kafkaLn.Addr().String() {
		t.Fatalf("kafka advertised %q, bound %s", n.kafkaAdvertise, n.kafkaLn.Addr())
	}
	m := startTestNode(t, ctx, t.TempDir(), nil, "--advertise-url", "http://n1.example:"+strconv.Itoa(4437))
	shutdownAtEnd(t, m)
	if m.cfg.AdvertiseURL != "http://n1.example:4437" {
		t.Fatalf("explicit advertise URL became %q", m.cfg.AdvertiseURL)
	}
}
