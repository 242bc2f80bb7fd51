package storeurl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

func TestOpenURLs(t *testing.T) {
	dir := t.TempDir()
	s, err := storeurl.Open(t.Context(), "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := objstore.Put(t.Context(), s, "k", []byte("v"), objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "k")); err != nil {
		t.Errorf("file:// root is not %s: %v", dir, err)
	}
	for _, bad := range []string{
		"", "/no/scheme", "ftp://x", "s3://", "s3://bucket?endpoint=x&bogus=1",
		"s3://user:pw@bucket", "s3://bucket?path_style=maybe", "s3://bucket/bad//prefix?endpoint=http://127.0.0.1:1",
		"s3://bucket?endpoint=ftp://host",
	} {
		if _, err := storeurl.Open(context.Background(), bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	// Credentials never end up in an error message.
	_, err = storeurl.Open(t.Context(), "s3://user:secretpw@bucket")
	if err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("error leaks the password: %v", err)
	}
}

func TestOpenS3MissingBucket(t *testing.T) {
	e := objstoretest.LookupS3Env(t)
	t.Setenv("AWS_ACCESS_KEY_ID", e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", e.SecretKey)
	_, err := storeurl.Open(t.Context(), objstoretest.S3Env{Endpoint: e.Endpoint, Bucket: "no-such-bucket-" + objstoretest.RandomHex(4)}.URL("p"))
	if !objstore.IsNotExist(err) || !errors.Is(err, objstore.ErrUnavailable) {
		t.Errorf("missing bucket: %v, want ErrNotExist and ErrUnavailable (a bucket may be created later)", err)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
	_, err = storeurl.Open(t.Context(), e.URL("p"))
	if !errors.Is(err, objstore.ErrPermission) || !errors.Is(err, objstore.ErrUnavailable) {
		t.Errorf("wrong secret: %v, want ErrPermission and ErrUnavailable (IAM may grant it later)", err)
	}
	for _, bad := range []string{"s3://b?sse=rot13", "s3://b?endpoint=ftp://x", "s3://b?nope=1"} {
		if _, err := storeurl.Open(t.Context(), bad); err == nil || errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("Open(%q): %v, want a configuration error, not ErrUnavailable", bad, err)
		}
	}
}
