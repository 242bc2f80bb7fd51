package meta_test

import (
	"context"
	"testing"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/meta/metatest"
)

// TestScramStore: credentials round-trip through a real etcd, per user
// and mechanism, and List reports iterations only.
func TestScramStore(t *testing.T) {
	cli := metatest.StartEtcd(t)
	ctx := context.Background()
	s := meta.NewScramStore(cli, "/scramtest")
	c := meta.ScramCredential{Salt: []byte("salt"), Iterations: 4096, StoredKey: []byte{1, 2}, ServerKey: []byte{3}}
	if err := s.Put(ctx, "SCRAM-SHA-256", "a/b", c); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "SCRAM-SHA-512", "a/b", meta.ScramCredential{Salt: []byte("x"), Iterations: 8192}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get(ctx, "SCRAM-SHA-256", "a/b")
	if err != nil || !ok || string(got.Salt) != "salt" || got.Iterations != 4096 || string(got.StoredKey) != "\x01\x02" {
		t.Fatalf("Get: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.Get(ctx, "SCRAM-SHA-256", "a"); ok {
		t.Fatal("a prefix of a user name found a credential")
	}
	all, err := s.List(ctx)
	if err != nil || len(all) != 1 || all["a/b"]["SCRAM-SHA-256"] != 4096 || all["a/b"]["SCRAM-SHA-512"] != 8192 {
		t.Fatalf("List: %v %v", all, err)
	}
	if ok, err := s.Delete(ctx, "SCRAM-SHA-256", "a/b"); !ok || err != nil {
		t.Fatalf("Delete: %v %v", ok, err)
	}
	if ok, _ := s.Delete(ctx, "SCRAM-SHA-256", "a/b"); ok {
		t.Fatal("second Delete found the credential")
	}
}
