package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/node/stream"
	"github.com/PicoMQ/picomq/record"
)

func strp(s string) *string { return &s }
func i64p(n int64) *int64   { return &n }

func TestValidateAndDeriveTopic(t *testing.T) {
	for _, ok := range []string{"orders", "a.b_c-d", strings.Repeat("x", stream.MaxTopicLen), "_single"} {
		if err := stream.ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a b", "a/b", "ä", "__consumer_offsets", strings.Repeat("x", stream.MaxTopicLen+1)} {
		if err := stream.ValidateTopic(bad); !errors.Is(err, stream.ErrInvalidTopic) {
			t.Errorf("ValidateTopic(%q) = %v, want ErrInvalidTopic", bad, err)
		}
	}
	for name, want := range map[string]string{
		"/orders":                        "orders",
		"/orders/eu/1":                   "orders.eu.1",
		"/a_b/c-d":                       "a_b.c-d",
		"/a/b:c":                         "", // ':' is no topic character
		"/_sys/offsets":                  "", // reserved streams never get one
		"/x/" + strings.Repeat("y", 300): "",
	} {
		got, ok := stream.DeriveTopic(name)
		if got != want || ok != (want != "") {
			t.Errorf("DeriveTopic(%q) = %q %v, want %q", name, got, ok, want)
		}
	}
}

func TestCreateTopicAliases(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	info, _, err := h.svc.Create(ctx, "/orders/eu", stream.CreateOptions{RetentionMs: 1000})
	if err != nil || info.KafkaTopic != "orders.eu" || info.RetentionMs != 1000 {
		t.Fatalf("derived: %+v %v", info, err)
	}
	if _, _, err := h.svc.Create(ctx, "/b", stream.CreateOptions{KafkaTopic: strp("orders.eu")}); !errors.Is(err, stream.ErrTopicConflict) {
		t.Fatalf("explicit taken alias: %v", err)
	}
	if _, err := h.svc.Head(ctx, "/b"); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("/b exists after a failed create: %v", err)
	}
	// Derived and taken: created without one.
	if _, _, err := h.svc.Create(ctx, "/x", stream.CreateOptions{KafkaTopic: strp("y.z")}); err != nil {
		t.Fatal(err)
	}
	if info, _, err := h.svc.Create(ctx, "/y/z", stream.CreateOptions{}); err != nil || info.KafkaTopic != "" {
		t.Fatalf("derived taken alias: %+v %v", info, err)
	}
	// Re-create: identical unless an explicit value differs.
	if _, created, err := h.svc.Create(ctx, "/orders/eu", stream.CreateOptions{}); err != nil || created {
		t.Fatalf("plain re-create: %v %v", created, err)
	}
	for _, o := range []stream.CreateOptions{{KafkaTopic: strp("other")}, {KafkaTopic: strp("")}, {RetentionMs: 5}, {RetentionBytes: 5}} {
		if _, _, err := h.svc.Create(ctx, "/orders/eu", o); !errors.Is(err, stream.ErrConflict) {
			t.Errorf("re-create with %+v: %v, want ErrConflict", o, err)
		}
	}
	if _, _, err := h.svc.Create(ctx, "/c", stream.CreateOptions{KafkaTopic: strp("bad topic")}); !errors.Is(err, stream.ErrInvalidTopic) {
		t.Fatalf("invalid explicit alias: %v", err)
	}
	if _, _, err := h.svc.Create(ctx, "/c", stream.CreateOptions{RetentionBytes: -1}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Fatalf("negative retention: %v", err)
	}
	// Aliases survive a restart and are freed by delete.
	h.reopen()
	if info, _ := h.svc.Head(ctx, "/orders/eu"); info.KafkaTopic != "orders.eu" || info.RetentionMs != 1000 {
		t.Fatalf("after restart: %+v", info)
	}
	if err := h.svc.Delete(ctx, "/orders/eu"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.Create(ctx, "/b", stream.CreateOptions{KafkaTopic: strp("orders.eu")}); err != nil {
		t.Fatalf("alias of a deleted stream not freed: %v", err)
	}
}

// TestConcurrentCreatesOneAlias: many streams racing for one explicit alias;
// exactly one gets it, the others get ErrTopicConflict and do not exist.
func TestConcurrentCreatesOneAlias(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, _, errs[i] = h.svc.Create(ctx, fmt.Sprintf("/r%d", i), stream.CreateOptions{KafkaTopic: strp("hot")})
		}(i)
	}
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, stream.ErrTopicConflict):
			if _, err := h.svc.Head(ctx, fmt.Sprintf("/r%d", i)); !errors.Is(err, stream.ErrNotFound) {
				t.Errorf("/r%d exists after losing the alias: %v", i, err)
			}
		default:
			t.Errorf("/r%d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d creates won the alias, want 1", wins)
	}
}

func TestConfigureAndList(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, n := range []string{"/l/1", "/l/2", "/l/3", "/m"} {
		if _, _, err := h.svc.Create(ctx, n, stream.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := h.svc.Configure(ctx, "/l/2", stream.ConfigChange{KafkaTopic: strp("two"), RetentionBytes: i64p(100)})
	if err != nil || info.KafkaTopic != "two" || info.RetentionBytes != 100 {
		t.Fatalf("configure: %+v %v", info, err)
	}
	if _, err := h.svc.Configure(ctx, "/l/1", stream.ConfigChange{KafkaTopic: strp("two")}); !errors.Is(err, stream.ErrTopicConflict) {
		t.Fatalf("taken alias: %v", err)
	}
	if _, err := h.svc.Configure(ctx, "/l/1", stream.ConfigChange{RetentionMs: i64p(-1)}); !errors.Is(err, stream.ErrInvalidArgument) {
		t.Fatalf("negative retention: %v", err)
	}
	if _, err := h.svc.Configure(ctx, "/nope", stream.ConfigChange{}); !errors.Is(err, stream.ErrNotFound) {
		t.Fatalf("missing stream: %v", err)
	}
	page, more, err := h.svc.List(ctx, "/l/", "", 2)
	if err != nil || !more || len(page) != 2 || page[0].Name != "/l/1" || page[1].KafkaTopic != "two" {
		t.Fatalf("page 1: %+v %v %v", page, more, err)
	}
	page, more, err = h.svc.List(ctx, "/l/", page[1].Name, 2)
	if err != nil || more || len(page) != 1 || page[0].Name != "/l/3" {
		t.Fatalf("page 2: %+v %v %v", page, more, err)
	}
	h.reopen()
	if info, _ := h.svc.Head(ctx, "/l/2"); info.KafkaTopic != "two" || info.RetentionBytes != 100 {
		t.Fatalf("config lost in restart: %+v", info)
	}
}

func TestTrimHidesOffsetsDurably(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/t", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := h.svc.Append(ctx, "/t", []record.Record{{Value: []byte{byte('a' + i)}}, {Value: []byte{byte('A' + i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Trim in the middle of a batch: offset 3 is the second record of
	// the second batch, and offsets 3.. stay readable.
	info, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: i64p(3)})
	if err != nil || info.StartOffset != 3 {
		t.Fatalf("trim: %+v %v", info, err)
	}
	var te *stream.TrimmedError
	if _, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 2}); !errors.As(err, &te) || te.StartOffset != 3 || !errors.Is(err, stream.ErrOffsetTrimmed) {
		t.Fatalf("read below start: %v", err)
	}
	res, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 3})
	if err != nil || fmt.Sprint(vals(res.Records)) != "[B c C d D]" || res.StartOffset != 3 {
		t.Fatalf("read at start: %v %+v", err, res)
	}
	if _, err := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: i64p(9)}); !errors.Is(err, stream.ErrOffsetOutOfRange) {
		t.Fatalf("trim past the end: %v", err)
	}
	if info, _ := h.svc.Configure(ctx, "/t", stream.ConfigChange{TrimBefore: i64p(1)}); info.StartOffset != 3 {
		t.Fatalf("trim moved the start back to %d", info.StartOffset)
	}
	h.reopen()
	if _, err := h.svc.Read(ctx, "/t", stream.ReadOptions{Offset: 0}); !errors.Is(err, stream.ErrOffsetTrimmed) {
		t.Fatalf("after restart: %v", err)
	}
	if info, _ := h.svc.Head(ctx, "/t"); info.StartOffset != 3 || info.NextOffset != 8 {
		t.Fatalf("after restart: %+v", info)
	}
}

func TestRetentionLoop(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	now := time.Now()
	h.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h.reopen()
	ctx := context.Background()
	if _, _, err := h.svc.Create(ctx, "/rt", stream.CreateOptions{RetentionMs: 10_000}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.svc.Create(ctx, "/keep", stream.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.svc.Append(ctx, "/rt", []record.Record{{Value: []byte("old")}})
		h.svc.Append(ctx, "/keep", []record.Record{{Value: []byte("old")}})
	}
	advance(8 * time.Second)
	h.svc.Append(ctx, "/rt", []record.Record{{Value: []byte("new")}})
	advance(5 * time.Second)

	// The loop applies retention on its own.
	stop := startJob(t, func(ctx context.Context) error {
		return h.svc.RunRetention(ctx, stream.RetentionOptions{Interval: 20 * time.Millisecond})
	})
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := h.svc.Head(ctx, "/rt")
		if info.StartOffset == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not advance the start offset: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if info, _ := h.svc.Head(ctx, "/keep"); info.StartOffset != 0 {
		t.Fatalf("a stream without retention was trimmed: %+v", info)
	}
	res, err := h.svc.Read(ctx, "/rt", stream.ReadOptions{Offset: 3})
	if err != nil || fmt.Sprint(vals(res.Records)) != "[new]" {
		t.Fatalf("after retention: %+v %v", res, err)
	}
	stop()
	h.reopen()
	if info, _ := h.svc.Head(ctx, "/rt"); info.StartOffset != 3 {
		t.Fatalf("retention not durable: %+v", info)
	}
}
