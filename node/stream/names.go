package stream

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen bounds a stream name in bytes. It keeps registry keys, object
// keys and log lines small, and is well below common proxy URL limits.
const MaxNameLen = 512

// reservedRoots are first path segments that belong to the server itself.
// Any name whose first segment starts with "_" is reserved as well.
var reservedRoots = map[string]bool{
	"healthz": true,
	"readyz":  true,
	"metrics": true,
}

// ValidateName checks a stream name against the documented grammar:
//
//	name    = 1*( "/" segment )
//	segment = 1*pchar            ; not "." or "..", first segment not "_…"
//	pchar   = ALPHA / DIGIT / "-" / "." / "_" / "~" / "!" / "$" / "&" / "'"
//	        / "(" / ")" / "*" / "+" / "," / ";" / "=" / ":" / "@"
//
// The grammar is the RFC 3986 path characters minus "%", so a name reads the
// same escaped or not and can be used unchanged in object keys. Reserved names
// get ErrReservedName so the HTTP layer can say why.
func ValidateName(name string) error {
	if name == "" || name[0] != '/' {
		return fmt.Errorf("%w: %q must start with '/'", ErrInvalidName, name)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidName, MaxNameLen)
	}
	segs := strings.Split(name[1:], "/")
	for i, seg := range segs {
		if seg == "" {
			return fmt.Errorf("%w: %q has an empty path segment", ErrInvalidName, name)
		}
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q contains a %q segment", ErrInvalidName, name, seg)
		}
		for j := 0; j < len(seg); j++ {
			if !isPchar(seg[j]) {
				return badChar(name, seg[j:])
			}
		}
		if i == 0 && (seg[0] == '_' || reservedRoots[seg]) {
			return fmt.Errorf("%w: %q is reserved by the server", ErrReservedName, "/"+seg)
		}
	}
	return nil
}

// badChar says which character of name (the rest of the name starts at
// rest) breaks the grammar and which rule: the name arrives percent-decoded,
// so a multi-byte UTF-8 character is reported as itself, not as its first
// byte.
func badChar(name, rest string) error {
	r, size := utf8.DecodeRuneInString(rest)
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Errorf("%w: %q contains the byte 0x%02X, which is not valid UTF-8; names use only the ASCII characters A-Z a-z 0-9 and -._~!$&'()*+,;=:@", ErrInvalidName, name, rest[0])
	case r >= utf8.RuneSelf:
		return fmt.Errorf("%w: %q contains %q (%U); names use only the ASCII characters A-Z a-z 0-9 and -._~!$&'()*+,;=:@ (no percent-encoded or non-ASCII characters)", ErrInvalidName, name, r, r)
	case r == '%':
		return fmt.Errorf("%w: %q contains '%%'; a name is never percent-encoded (names use only A-Z a-z 0-9 and -._~!$&'()*+,;=:@)", ErrInvalidName, name)
	default:
		return fmt.Errorf("%w: %q contains %q, which is not allowed in a name (names use only A-Z a-z 0-9 and -._~!$&'()*+,;=:@)", ErrInvalidName, name, r)
	}
}

func isPchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0
}
