package wire

import "testing"

// TestValueText: the value of a JSON read record as the server writes it
// (docs/api.md#formats) reads back as the stored value's text.
func TestValueText(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		raw, enc string
		want     *string
		embedded bool
	}{
		{`"hello"`, "", str("hello"), false},           // UTF-8 text
		{`"aGk="`, EncodingBase64, str("aGk="), false}, // base64 stays encoded
		{`null`, "", nil, false},                       // a null value
		{``, "", nil, false},                           // absent
		{`{"a":1}`, "", str(`{"a":1}`), true},          // a JSON stream's object
		{`42`, "", str("42"), true},
		{`"s"`, EncodingJSON, str(`"s"`), true}, // a JSON string, flagged
		{`null`, EncodingJSON, str("null"), true},
	} {
		r := JSONRecord{Value: []byte(c.raw), ValueEncoding: c.enc}
		got, err := r.ValueText()
		if err != nil {
			t.Fatalf("%s/%s: %v", c.raw, c.enc, err)
		}
		if (got == nil) != (c.want == nil) || (got != nil && *got != *c.want) || r.ValueEmbedded() != c.embedded {
			t.Errorf("%s/%s: got %v (embedded %v), want %v (embedded %v)", c.raw, c.enc, deref(got), r.ValueEmbedded(), deref(c.want), c.embedded)
		}
	}
	if _, err := (JSONRecord{Value: []byte(`"unterminated`)}).ValueText(); err == nil {
		t.Error("a broken string value decoded without an error")
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
