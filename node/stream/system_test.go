package stream_test

import (
	"context"
	"errors"
	"testing"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

// TestSystemStreams: server components (WithSystemAccess) create, append,
// read, list and delete streams under /_sys/; a client context is refused
// every one of them, also once the stream is loaded in memory, and client
// listings never show them.
func TestSystemStreams(t *testing.T) {
	h := newHarness(t)
	client := context.Background()
	sys := stream.WithSystemAccess(client)
	const name = stream.SystemRoot + "kafka/groups/g"

	if _, _, err := h.svc.Create(client, name, stream.CreateOptions{}); !errors.Is(err, stream.ErrReservedName) {
		t.Fatalf("client create: %v, want ErrReservedName", err)
	}
	if _, _, err := h.svc.Create(sys, stream.SystemRoot+"a//b", stream.CreateOptions{}); !errors.Is(err, stream.ErrInvalidName) {
		t.Fatalf("system create of a malformed name: %v, want ErrInvalidName", err)
	}
	if _, created, err := h.svc.Create(sys, name, stream.CreateOptions{}); err != nil || !created {
		t.Fatalf("system create: %v %v", created, err)
	}
	if _, err := h.svc.Append(sys, name, []record.Record{{Value: []byte("v")}}); err != nil {
		t.Fatalf("system append: %v", err)
	}
	if _, _, err := h.svc.Create(client, "/user", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		if _, err := h.svc.Append(client, name, []record.Record{{Value: []byte("x")}}); !errors.Is(err, stream.ErrReservedName) {
			t.Fatalf("%s: client append: %v", when, err)
		}
		if _, err := h.svc.Read(client, name, stream.ReadOptions{}); !errors.Is(err, stream.ErrReservedName) {
			t.Fatalf("%s: client read: %v", when, err)
		}
		if _, err := h.svc.Describe(client, name); !errors.Is(err, stream.ErrReservedName) {
			t.Fatalf("%s: client describe: %v", when, err)
		}
		if err := h.svc.Delete(client, name); !errors.Is(err, stream.ErrReservedName) {
			t.Fatalf("%s: client delete: %v", when, err)
		}
		if infos, _, err := h.svc.List(client, "/", "", 100); err != nil || len(infos) != 1 || infos[0].Name != "/user" {
			t.Fatalf("%s: client list = %+v %v", when, infos, err)
		}
		if infos, _, err := h.svc.List(sys, stream.SystemRoot, "", 100); err != nil || len(infos) != 1 || infos[0].Name != name {
			t.Fatalf("%s: system list = %+v %v", when, infos, err)
		}
		res, err := h.svc.Read(sys, name, stream.ReadOptions{})
		if err != nil || len(res.Records) != 1 || string(res.Records[0].Value) != "v" {
			t.Fatalf("%s: system read = %+v %v", when, res.Records, err)
		}
	}
	check("loaded")
	h.reopen()
	check("after restart")
	if err := h.svc.Delete(sys, name); err != nil {
		t.Fatalf("system delete: %v", err)
	}
}
