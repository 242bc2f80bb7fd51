package pico

import (
	"testing"
)

// TestJSONBodiesMustBeUTF8 (issue 27, finding 6): a JSON batch or PATCH
// body with invalid UTF-8 in a string is refused, not decoded with the
// bytes replaced by U+FFFD (which would store other bytes than were sent).
func TestJSONBodiesMustBeUTF8(t *testing.T) {
	for _, body := range []string{
		"[{\"key\":\"k\xff\",\"value\":1}]",
		"[{\"value\":\"v\xc3\"}]",
		"[{\"value\":{\"a\":\"\xed\xa0\x80\"}}]",
		"[{\"value\":1,\"headers\":[{\"key\":\"h\",\"value\":\"\xfe\"}]}]",
	} {
		if recs, err := parseJSONBatch([]byte(body), fuzzLimits); err == nil {
			t.Errorf("batch %q accepted as %d records", body, len(recs))
		}
	}
	if _, err := parseJSONBatch([]byte(`[{"key":"é","value":"ü"}]`), fuzzLimits); err != nil {
		t.Errorf("valid UTF-8 refused: %v", err)
	}
	if _, err := parsePatch([]byte("{\"retention\":\"\xff\"}")); err == nil {
		t.Error("PATCH with invalid UTF-8 accepted")
	}
}
