package wire

import "testing"

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
