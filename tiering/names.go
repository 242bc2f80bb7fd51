package tiering

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Object name prefixes. They are part of the storage layout: changing them
// orphans every object already written.
const (
	L0Prefix      = "l0/"
	StreamsPrefix = "streams/"
)

// NewNonce returns 16 random hex digits for L0 names.
func NewNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// validNode reports whether node can be one key component.
func validNode(node string) error {
	if node == "" || strings.ContainsAny(node, "/\\") || node[0] == '.' {
		return fmt.Errorf("tiering: node id %q cannot be an object name component", node)
	}
	return nil
}

// L0Key names one flush object of node.
func L0Key(node string, seq uint64, nonce string) string {
	return fmt.Sprintf("%s%s/%020d-%s", L0Prefix, node, seq, nonce)
}

// L0NodePrefix is the List prefix of node's flush objects.
func L0NodePrefix(node string) string { return L0Prefix + node + "/" }

// ParseL0Key is the inverse of L0Key.
func ParseL0Key(key string) (node string, seq uint64, nonce string, ok bool) {
	rest, ok := strings.CutPrefix(key, L0Prefix)
	if !ok {
		return "", 0, "", false
	}
	node, name, ok := strings.Cut(rest, "/")
	if !ok || validNode(node) != nil {
		return "", 0, "", false
	}
	digits, nonce, ok := strings.Cut(name, "-")
	if !ok || len(digits) != 20 || nonce == "" || strings.Contains(nonce, "/") {
		return "", 0, "", false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	return node, seq, nonce, true
}

// L1Key names the segment of stream starting at base offset.
func L1Key(stream uint64, base int64) string {
	return fmt.Sprintf("%s%020d/%020d", StreamsPrefix, stream, base)
}

// StreamPrefix is the List prefix of a stream's segments (retention and
// stream deletion list it).
func StreamPrefix(stream uint64) string { return fmt.Sprintf("%s%020d/", StreamsPrefix, stream) }

// ParseL1Key is the inverse of L1Key.
func ParseL1Key(key string) (stream uint64, base int64, ok bool) {
	rest, ok := strings.CutPrefix(key, StreamsPrefix)
	if !ok {
		return 0, 0, false
	}
	a, b, ok := strings.Cut(rest, "/")
	if !ok || len(a) != 20 || len(b) != 20 {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(a, 10, 64)
	o, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || o < 0 {
		return 0, 0, false
	}
	return s, o, true
}
