package tftests

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzGlob checks the IAM wildcard matcher of the policy model against a
// regular expression built from the same pattern (* = any run, ? = one
// character, everything else literal): the permission tests are only as
// good as this match.
func FuzzGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"test/*", "test/l0/n1/00000000000000000001-ab"},
		{"arn:aws:s3:::b/test/*", "arn:aws:s3:::b/test-etcd-backups/x.db"},
		{"s3:*Object", "s3:GetObject"},
		{"a?c", "abc"},
		{"**", ""},
		{"*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{"é*", "é\u00e9"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		// IAM strings are UTF-8 (the regexp reads invalid bytes as U+FFFD,
		// glob compares bytes): only valid input is compared.
		if len(pattern) > 64 || len(s) > 256 || !utf8.ValidString(pattern) || !utf8.ValidString(s) {
			return
		}
		var re strings.Builder
		re.WriteString(`(?s)^`)
		for _, r := range pattern {
			switch r {
			case '*':
				re.WriteString(`.*`)
			case '?':
				re.WriteString(`.`)
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		re.WriteString(`$`)
		want := regexp.MustCompile(re.String()).MatchString(s)
		// glob works on bytes, so '?' is one byte: compare on ASCII only
		// for '?', where a rune and a byte differ.
		if strings.Contains(pattern, "?") && !isASCII(s) {
			return
		}
		if got := glob(pattern, s); got != want {
			t.Fatalf("glob(%q, %q) = %v, want %v", pattern, s, got, want)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
