package picomq

import (
	"encoding/json"
	"testing"
)

// ackSeeds are bodies the server writes (api/pico appendAckJSON) and
// near misses the hand decoder must leave to encoding/json.
var ackSeeds = []string{
	"{\"offset\":0,\"nextOffset\":1,\"timestamp\":1764670000000,\"count\":1}\n",
	"{\"offset\":41,\"nextOffset\":44,\"timestamp\":1764670000123,\"count\":3,\"duplicate\":true}\n",
	"{\"offset\":7,\"nextOffset\":8,\"timestamp\":1,\"count\":1,\"producerEpoch\":2,\"producerSeq\":9}\n",
	"{\"offset\":7,\"nextOffset\":8,\"timestamp\":1,\"count\":1,\"duplicate\":true,\"producerEpoch\":0,\"producerSeq\":18446744073709551615}\n",
	`{"offset":-1,"nextOffset":-1,"timestamp":0,"count":0}`,
	`{"offset":1.5,"nextOffset":2,"timestamp":0,"count":1}`,
	`{"offset":1e3,"nextOffset":2,"timestamp":0,"count":1}`,
	`{"offset":01,"nextOffset":2,"timestamp":0,"count":1}`,
	`{"offset":9223372036854775807,"nextOffset":2,"timestamp":0,"count":1}`,
	`{"offset":1,"nextOffset":2,"timestamp":0,"count":1,"duplicate":false}`,
	`{"nextOffset":2,"offset":1,"timestamp":0,"count":1}`,
	`{"offset":1,"nextOffset":2,"timestamp":0,"count":1}x`,
	` {"offset":1,"nextOffset":2,"timestamp":0,"count":1}`,
	`{"offset":-0,"nextOffset":2,"timestamp":0,"count":1}`,
}

// TestParseAppendAck: the server's bodies take the hand-written path and
// decode as encoding/json decodes them.
func TestParseAppendAck(t *testing.T) {
	for _, s := range ackSeeds[:5] {
		got, ok := parseAppendAck([]byte(s))
		var want appendAckJSON
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatal(err)
		}
		if !ok || got != want {
			t.Errorf("%q: %+v, %v; encoding/json: %+v", s, got, ok, want)
		}
	}
	for _, s := range ackSeeds[5:] {
		if a, ok := parseAppendAck([]byte(s)); ok {
			var want appendAckJSON
			if err := json.Unmarshal([]byte(s), &want); err != nil || a != want {
				t.Errorf("%q: accepted as %+v; encoding/json: %+v, %v", s, a, want, err)
			}
		}
	}
}

// FuzzParseAppendAck: whatever the hand decoder accepts, encoding/json
// accepts too and decodes to the same values.
func FuzzParseAppendAck(f *testing.F) {
	for _, s := range ackSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := parseAppendAck(b)
		if !ok {
			return
		}
		var want appendAckJSON
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("%q: hand decoder accepted, encoding/json: %v", b, err)
		}
		if got != want {
			t.Fatalf("%q: hand decoder %+v, encoding/json %+v", b, got, want)
		}
	})
}

// BenchmarkParseAppendAck compares the two decoders on the common body.
func BenchmarkParseAppendAck(b *testing.B) {
	body := []byte(ackSeeds[0])
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := parseAppendAck(body); !ok {
				b.Fatal("not accepted")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a appendAckJSON
			if err := json.Unmarshal(body, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}
