package node

import (
	"net"
	"os"
	"strconv"
)

// Advertised addresses. A node tells other nodes (redirects, the
// membership record) and Kafka clients (Metadata) where to reach it. The
// default is the bound address, but a listener bound to an unspecified
// address ("0.0.0.0", "::", an empty host) or to port 0 has no address a
// client could dial: advertising "http://0.0.0.0:4437" sends every
// redirect to the client's own host. Such a default is replaced by a real
// address of this host with the bound port, and the node logs that it did
// so and how to choose one (--advertise-url, --kafka-advertise-addr).

// advertisedHostPort is the host:port to advertise for a listener bound
// to bound (its real address) when it was asked for listen; derived says
// the host was chosen by the node rather than taken from the setting.
func advertisedHostPort(listen string, bound net.Addr) (hostPort string, derived bool) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return bound.String(), false
	}
	port := ""
	if ta, ok := bound.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
	} else if _, p, err := net.SplitHostPort(bound.String()); err == nil {
		port = p
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return net.JoinHostPort(host, port), false
	}
	return net.JoinHostPort(hostAddress(), port), true
}

// hostAddress is an address other hosts can likely reach this one at:
// the first non-loopback unicast address of an interface that is up
// (IPv4 first), else the hostname, else the loopback address.
func hostAddress() string {
	var v6 string
	if ifaces, err := net.Interfaces(); err == nil {
		for _, ifc := range ifaces {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok || !ipn.IP.IsGlobalUnicast() {
					continue
				}
				if ipn.IP.To4() != nil {
					return ipn.IP.String()
				}
				if v6 == "" {
					v6 = ipn.IP.String()
				}
			}
		}
	}
	if v6 != "" {
		return v6
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "127.0.0.1"
}
