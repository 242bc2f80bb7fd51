package h1lane

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// head is one parsed request head that the lane serves itself.
type head struct {
	method, target string
	url            *url.URL
	host           string
	contentLength  int64
	close          bool // Connection: close
	// last is the previous request target of the connection, parsed: a
	// producer sends every append to the same stream, so its URL is
	// copied instead of parsed again.
	last struct {
		target string
		url    url.URL
	}
}

// parseHead parses b, a whole request head ending in "\r\n\r\n", into h
// and hdr (cleared first; Host is not put in it, as net/http does not).
// It reports false for anything that is not a simple request, which the
// caller then hands to net/http untouched: so every answer to a malformed
// or unusual request stays net/http's. Simple means: `POST|PUT|DELETE SP
// origin-form SP HTTP/1.1`, lines ending in CRLF, every header line a
// token, a colon and a value of visible characters, exactly one valid
// Host, at most one decimal Content-Length, and none of the headers that
// change how the message is framed or what the connection becomes
// (Transfer-Encoding, Expect, Upgrade, HTTP2-Settings) or that net/http
// rewrites (Pragma). The strings in h and hdr share one copy of b.
func parseHead(b []byte, h *head, hdr http.Header) bool {
	clear(hdr)
	*h = head{last: h.last}
	if len(b) < 4 || string(b[len(b)-4:]) != "\r\n\r\n" {
		return false
	}
	s := string(b[:len(b)-2]) // every line, each ending in CRLF
	eol := strings.Index(s, "\r\n")
	line := s[:eol]
	method, rest, ok := strings.Cut(line, " ")
	if !ok {
		return false
	}
	target, proto, ok := strings.Cut(rest, " ")
	if !ok || proto != "HTTP/1.1" {
		return false
	}
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodDelete:
	default:
		return false
	}
	if target == "" || target[0] != '/' {
		return false
	}
	if target != h.last.target {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return false
		}
		h.last.target, h.last.url = target, *u
	}
	// The request's URL (a copy: a handler may change it) and the
	// backing array of the header values share one allocation.
	mem := new(headMem)
	mem.url = h.last.url
	h.method, h.target, h.url = method, target, &mem.url

	// One backing array for the values of single-valued headers; each
	// slice is capped, so a handler's append never overwrites its
	// neighbour.
	vals := mem.vals[:0]
	if n := strings.Count(s, "\r\n"); n > len(mem.vals) {
		vals = make([]string, 0, n)
	}
	haveHost, haveLength := false, false
	for rest = s[eol+2:]; rest != ""; {
		eol = strings.Index(rest, "\r\n")
		line, rest = rest[:eol], rest[eol+2:]
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return false
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !validName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return false
		}
		key := http.CanonicalHeaderKey(name)
		switch key {
		case "Host":
			if haveHost || !httpguts.ValidHostHeader(value) {
				return false
			}
			haveHost, h.host = true, value
			continue
		case "Content-Length":
			n, ok := parseLength(value)
			if haveLength || !ok {
				return false
			}
			haveLength, h.contentLength = true, n
		case "Transfer-Encoding", "Expect", "Upgrade", "Http2-Settings", "Pragma":
			return false
		case "Connection":
			if httpguts.HeaderValuesContainsToken([]string{value}, "close") {
				h.close = true
			}
		}
		if prev, ok := hdr[key]; ok {
			hdr[key] = append(prev, value)
			continue
		}
		vals = append(vals, value)
		hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	if !haveHost {
		return false
	}
	if h.url.Host != "" {
		h.host = h.url.Host
	}
	return true
}

// headMem is the memory of one parsed head besides its bytes: each
// allocation costs about a microsecond on a cold append (200/s).
type headMem struct {
	url  url.URL
	vals [12]string // header values; a longer head gets its own array
}

// trimOWS drops the spaces and tabs around a header value.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func validName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// parseLength accepts 1 to 18 decimal digits (so the value fits an
// int64 without overflow checks), the spellings net/http accepts too.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, true
}
