package main

import (
	"strings"
	"testing"
)

// TestExternalStore: PICOMQ_BENCH_S3_ENDPOINT points the object rows at a
// store the matrix does not start; without a bucket or credentials the
// matrix says so instead of writing to a default, and every key it writes
// there lies under a prefix of its own.
func TestExternalStore(t *testing.T) {
	t.Setenv("PICOMQ_BENCH_S3_ENDPOINT", "")
	if _, ok, err := externalStore(); ok || err != nil {
		t.Fatalf("unset: external %v, err %v; want neither", ok, err)
	}

	t.Setenv("PICOMQ_BENCH_S3_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("PICOMQ_BENCH_S3_BUCKET", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	if _, ok, err := externalStore(); !ok || err == nil || !strings.Contains(err.Error(), "PICOMQ_BENCH_S3_BUCKET") {
		t.Fatalf("no bucket: external %v, err %v; want an error naming PICOMQ_BENCH_S3_BUCKET", ok, err)
	}

	t.Setenv("PICOMQ_BENCH_S3_BUCKET", "b")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, _, err := externalStore(); err == nil || !strings.Contains(err.Error(), "AWS_SECRET_ACCESS_KEY") {
		t.Fatalf("no credentials: err %v; want one naming AWS_SECRET_ACCESS_KEY", err)
	}

	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	t.Setenv("AWS_REGION", "")
	t.Setenv("PICOMQ_BENCH_S3_REGION", "eu-west-1")
	s, ok, err := externalStore()
	if !ok || err != nil {
		t.Fatalf("complete: external %v, err %v", ok, err)
	}
	if !s.external || s.root == "" || !strings.HasSuffix(s.root, "/") {
		t.Fatalf("store %+v: want external with a root prefix", s)
	}
	want := "s3://b/" + s.root + "r1-object?endpoint=http://127.0.0.1:1&region=eu-west-1"
	if got := s.url("r1-object/"); got != want {
		t.Fatalf("url = %q, want %q", got, want)
	}
	if got := (minio{endpoint: "http://127.0.0.1:2", bucket: "t"}).url("r1/"); got != "s3://t/r1?endpoint=http://127.0.0.1:2&region=us-east-1" {
		t.Fatalf("the matrix's own MinIO: url = %q, unchanged keys and region wanted", got)
	}
}
