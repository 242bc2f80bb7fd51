package wire

import (
	"mime"
	"testing"
)

func TestJSONPredicates(t *testing.T) {
	for _, c := range []struct {
		ct            string
		json, dsJSON  bool
		wantMediaType string
	}{
		{"application/json", true, true, "application/json"},
		{"Application/JSON; charset=utf-8", true, true, "application/json"},
		{"application/ld+json", true, false, "application/ld+json"},
		{"application/vnd.api+json; v=2", true, false, "application/vnd.api+json"},
		{"text/plain", false, false, "text/plain"},
		{"application/octet-stream", false, false, "application/octet-stream"},
		{" application/json ;;bad", true, true, "application/json"},
		{"", false, false, ""},
	} {
		if got := MediaType(c.ct); got != c.wantMediaType {
			t.Errorf("MediaType(%q) = %q, want %q", c.ct, got, c.wantMediaType)
		}
		if got := IsJSON(c.ct); got != c.json {
			t.Errorf("IsJSON(%q) = %v, want %v", c.ct, got, c.json)
		}
		if got := IsDSJSONMode(c.ct); got != c.dsJSON {
			t.Errorf("IsDSJSONMode(%q) = %v, want %v", c.ct, got, c.dsJSON)
		}
	}
}

// FuzzPlainMediaType: a value IsPlainMediaType accepts is exactly what
// mime.ParseMediaType returns for it, with no parameters and no error, so
// the fast path of MediaType (and of the Pico append shape) answers what
// the parser would.
func FuzzPlainMediaType(f *testing.F) {
	for _, s := range []string{"application/json", "text/plain", "application/octet-stream", "a/b", "/b", "a/", "a/b/c",
		"Text/plain", "text/plain; charset=utf-8", "text/pl ain", "application/vnd.picomq.batch", "x-y/z+json", "a@b/c", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if !IsPlainMediaType(ct) {
			return
		}
		mt, params, err := mime.ParseMediaType(ct)
		if err != nil || mt != ct || len(params) != 0 {
			t.Fatalf("IsPlainMediaType(%q) but mime says %q %v %v", ct, mt, params, err)
		}
		if MediaType(ct) != ct {
			t.Fatalf("MediaType(%q) = %q", ct, MediaType(ct))
		}
	})
}
