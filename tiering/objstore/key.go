package objstore

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key any implementation accepts: S3's limit, so a
// key that works on the file store also works on S3.
const MaxKeyLen = 1024

// ValidateKey returns nil if key follows the rules in the package
// documentation, otherwise an error wrapping ErrInvalidKey.
func ValidateKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %q: length %d not in [1, %d]", ErrInvalidKey, key, len(key), MaxKeyLen)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %q: not UTF-8", ErrInvalidKey, key)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("%w: %q: control character or backslash", ErrInvalidKey, key)
		}
	}
	for part := range strings.SplitSeq(key, "/") {
		if part == "" || part[0] == '.' {
			return fmt.Errorf("%w: %q: empty component or component starting with '.'", ErrInvalidKey, key)
		}
	}
	return nil
}

// ValidatePrefix checks a List prefix: empty, or a key prefix that could
// still be completed into a valid key (a trailing '/' is allowed, and the
// last component may be partial).
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	probe := prefix
	if strings.HasSuffix(probe, "/") {
		probe += "x"
	}
	if err := ValidateKey(probe); err != nil {
		return fmt.Errorf("%w (list prefix %q)", err, prefix)
	}
	return nil
}
