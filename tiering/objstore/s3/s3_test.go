package s3_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	"github.com/PicoMQ/picomq/tiering/objstore/s3"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
)

// recorder is an http.RoundTripper that keeps the headers of every PUT.
type recorder struct {
	mu   sync.Mutex
	puts []http.Header
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut {
		r.mu.Lock()
		r.puts = append(r.puts, req.Header.Clone())
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) last(t *testing.T) http.Header {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.puts) == 0 {
		t.Fatal("no PUT was sent")
	}
	return r.puts[len(r.puts)-1]
}

func openRecorded(t *testing.T, o s3.Options) (*s3.Store, *recorder) {
	t.Helper()
	e := objstoretest.LookupS3Env(t)
	rec := &recorder{}
	o.Bucket, o.Endpoint, o.Region, o.Transport = e.Bucket, e.Endpoint, "us-east-1", rec
	o.AccessKey, o.SecretKey = e.AccessKey, e.SecretKey
	o.Prefix = "hdr-" + objstoretest.RandomHex(6)
	s, err := s3.New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for a, err := range s.List(t.Context(), "") {
			if err == nil {
				_ = s.Delete(t.Context(), a.Key)
			}
		}
		s.Close()
	})
	return s, rec
}

// TestS3UploadHeaders: every PUT carries a CRC32C checksum that the server
// verifies, and a conditional create carries If-None-Match: *, checked on
// the wire against MinIO.
func TestS3UploadHeaders(t *testing.T) {
	s, rec := openRecorded(t, s3.Options{})
	data := bytes.Repeat([]byte("picomq"), 1000)
	if err := objstore.Put(t.Context(), s, "a", data, objstore.CreateOptions{IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	h := rec.last(t)
	if h.Get("If-None-Match") != "*" {
		t.Errorf("conditional create sent If-None-Match %q, want *", h.Get("If-None-Match"))
	}
	if h.Get("X-Amz-Checksum-Crc32c") == "" && !strings.Contains(h.Get("X-Amz-Trailer"), "crc32c") {
		t.Errorf("PUT without a CRC32C checksum: %v", h)
	}
	if err := objstore.Put(t.Context(), s, "b", data, objstore.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if h := rec.last(t); h.Get("If-None-Match") != "" {
		t.Errorf("plain create sent If-None-Match %q", h.Get("If-None-Match"))
	}
}

// TestS3SSEHeaders: sse=aws:kms with a key sends both headers on every
// PUT. (The loopback MinIO has no KMS, so the PUT itself is refused; the
// test checks what was asked for.)
func TestS3SSEHeaders(t *testing.T) {
	s, rec := openRecorded(t, s3.Options{SSE: "aws:kms", SSEKMSKeyID: "arn:aws:kms:us-east-1:111122223333:key/test"})
	_ = objstore.Put(t.Context(), s, "enc", []byte("x"), objstore.CreateOptions{})
	h := rec.last(t)
	if h.Get("X-Amz-Server-Side-Encryption") != "aws:kms" ||
		h.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id") != "arn:aws:kms:us-east-1:111122223333:key/test" {
		t.Errorf("SSE headers: %v", h)
	}
}

func TestS3OptionsRejected(t *testing.T) {
	for _, raw := range []string{
		"s3://bucket?sse=des",
		"s3://bucket?sse_kms_key_id=k",
		"s3://bucket?sse=AES256&sse_kms_key_id=k",
	} {
		if _, err := storeurl.Open(t.Context(), raw); err == nil || !strings.Contains(err.Error(), "sse") {
			t.Errorf("Open(%q): %v, want an sse error", raw, err)
		}
	}
	if !s3.DirectoryBucket("picomq--use1-az4--x-s3") || s3.DirectoryBucket("picomq-segments") {
		t.Error("DirectoryBucket")
	}
}

// TestS3Store runs the same suite against MinIO. Under CI it fails rather
// than skips when MinIO is not configured.
func TestS3Store(t *testing.T) {
	objstoretest.Run(t, objstoretest.S3FromEnv(t))
}

// faultTransport fails GETs on command, the ways a network or a proxy
// does: a connection closed before the answer (the error net/http gives,
// io.EOF), or an answer that ignores the Range header and whose body ends
// early without an error of its own (served from whole, not the store).
type faultTransport struct {
	mode  string // "", "drop" or "ignore-range-cut"
	whole []byte // the object, for ignore-range-cut
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/obj") {
		return http.DefaultTransport.RoundTrip(req)
	}
	switch f.mode {
	case "drop":
		return nil, io.EOF
	case "ignore-range-cut":
		// A 200 for the whole object, the length it promises and a
		// body that stops after 1000 bytes.
		return &http.Response{
			StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Length": {strconv.Itoa(len(f.whole))}, "Content-Type": {"application/octet-stream"}},
			ContentLength: int64(len(f.whole)),
			Body:          io.NopCloser(bytes.NewReader(f.whole[:1000])),
			Request:       req,
		}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestS3FailedReadsAreNotTheObjectsEnd: a GET that failed in transport
// must never read as io.EOF, which an io.ReaderAt caller takes for "the
// object ends here" (the block cache kept such a GET as the object's end;
// the segment reader then called the object truncated, corrupt). The AWS
// SDK wraps a connection closed before the answer around io.EOF.
func TestS3FailedReadsAreNotTheObjectsEnd(t *testing.T) {
	e := objstoretest.LookupS3Env(t)
	ft := &faultTransport{}
	s, err := s3.New(t.Context(), s3.Options{Bucket: e.Bucket, Endpoint: e.Endpoint, Region: "us-east-1", Transport: ft,
		AccessKey: e.AccessKey, SecretKey: e.SecretKey, Prefix: "eof-" + objstoretest.RandomHex(6)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<10) // 16 KiB
	w, err := s.Create(t.Context(), "obj", objstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	defer s.Delete(t.Context(), "obj")
	ft.whole = data
	for _, mode := range []string{"drop", "ignore-range-cut"} {
		ft.mode = mode
		p := make([]byte, 4096)
		n, err := s.ReadAt(t.Context(), "obj", p, 2048)
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: ReadAt = %d, %v; want an error that is not io.EOF", mode, n, err)
		}
		rc, err := s.ReadRange(t.Context(), "obj", 2048, 4096)
		if err == nil {
			var got []byte
			got, err = io.ReadAll(rc) // ReadAll ends at io.EOF: a short body must end otherwise
			rc.Close()
			if err == nil && len(got) < 4096 {
				err = io.EOF
			}
		}
		if err == nil || errors.Is(err, io.EOF) {
			t.Errorf("%s: ReadRange: %v; want an error that is not io.EOF", mode, err)
		}
		if mode == "drop" && !errors.Is(err, objstore.ErrUnavailable) {
			t.Errorf("drop: %v, want objstore.ErrUnavailable", err)
		}
	}
	// The object's real end is still io.EOF.
	ft.mode = ""
	p := make([]byte, 4096)
	if n, err := s.ReadAt(t.Context(), "obj", p, int64(len(data))-100); n != 100 || err != io.EOF {
		t.Errorf("read across the end: %d, %v; want 100, io.EOF", n, err)
	}
}
