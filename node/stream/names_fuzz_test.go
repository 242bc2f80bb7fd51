package stream

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzValidateName: an accepted stream name has none of what the grammar
// forbids: no "." or ".." segment, no NUL, control, space, "%" or
// non-ASCII byte, no empty segment, no reserved first segment, at most
// MaxNameLen bytes.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"/a", "/orders/1042", "/a/../b", "/a/./b", "/a\x00b", "/\xff", "/_streams", "/healthz", "//", "/a%2f", "/" + strings.Repeat("x", 600)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		if len(name) > MaxNameLen || !utf8.ValidString(name) || name[0] != '/' {
			t.Fatalf("accepted %q", name)
		}
		for i, seg := range strings.Split(name[1:], "/") {
			if seg == "" || seg == "." || seg == ".." || (i == 0 && (seg[0] == '_' || reservedRoots[seg])) {
				t.Fatalf("accepted %q (segment %q)", name, seg)
			}
		}
		for i := 0; i < len(name); i++ {
			if c := name[i]; c <= ' ' || c >= 0x7f || c == '%' {
				t.Fatalf("accepted %q with byte %#x", name, c)
			}
		}
	})
}
