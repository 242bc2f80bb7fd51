package meta_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metadata"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// freeAddr returns a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestDialFailsFastWithoutServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	cli, err := meta.Dial(ctx, []string{"http://" + freeAddr(t)})
	if err == nil {
		cli.Close()
		t.Fatal("Dial to a closed port succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial error = %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Dial took %v despite a 2s context", d)
	}
	if _, err := meta.Dial(context.Background(), nil); !errors.Is(err, metadata.ErrInvalid) {
		t.Fatalf("Dial(nil endpoints): err = %v, want ErrInvalid", err)
	}
}
