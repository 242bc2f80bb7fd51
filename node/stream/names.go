package stream

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"
)

// SystemRoot is the reserved root of the server's own streams (the Kafka
// consumer groups' committed offsets live under it). Clients can never
// name them: the protocol frontends get ErrReservedName as for any other
// reserved name. Server components reach them with a context from
// WithSystemAccess.
const SystemRoot = "/_sys/"

type systemAccessKey struct{}

// WithSystemAccess marks ctx as coming from a server component, which may
// create, read, append to, list and delete streams under SystemRoot. The
// frontends never set it, so a client request cannot.
func WithSystemAccess(ctx context.Context) context.Context {
	return context.WithValue(ctx, systemAccessKey{}, true)
}

func systemAccess(ctx context.Context) bool {
	ok, _ := ctx.Value(systemAccessKey{}).(bool)
	return ok
}

// IsSystemName reports whether name is under SystemRoot.
func IsSystemName(name string) bool { return strings.HasPrefix(name, SystemRoot) }

// validateFor is ValidateName, except that a server component (ctx from
// WithSystemAccess) may name streams under SystemRoot; their remaining
// segments follow the same grammar.
func validateFor(ctx context.Context, name string) error {
	if IsSystemName(name) && systemAccess(ctx) {
		return ValidateName("/sys/" + name[len(SystemRoot):])
	}
	return ValidateName(name)
}

// checkAccess refuses a client (no system access) a system stream that this
// node already holds in memory, where the name is not validated again.
func checkAccess(ctx context.Context, name string) error {
	if IsSystemName(name) && !systemAccess(ctx) {
		return fmt.Errorf("%w: %q is reserved by the server", ErrReservedName, "/_sys")
	}
	return nil
}

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
	// Segment by segment without splitting into a slice: every Durable
	// Streams request validates its name.
	for i, rest, more := 0, name[1:], true; more; i++ {
		var seg string
		seg, rest, more = strings.Cut(rest, "/")
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
