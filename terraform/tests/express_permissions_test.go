package tftests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/smithy-go/middleware"
	"github.com/zclconf/go-cty/cty"

	"github.com/PicoMQ/picomq/tiering/objstore"
	s3store "github.com/PicoMQ/picomq/tiering/objstore/s3"
)

// expressRequests is iamRequests for an S3 Express One Zone directory
// bucket: IAM authorizes only the session (s3express:CreateSession on the
// bucket's s3express ARN, with the s3express:SessionMode key); the object
// calls that follow are authorized by the session token, not by IAM
// ("Authorizing Regional endpoint APIs with IAM" / "CreateSession" in the
// S3 Express documentation). Any other call is asked of IAM as itself and
// is denied unless granted outright.
func expressRequests(c s3Call, bucketARN string) []Request {
	switch c.Op {
	case "CreateSession":
		mode := c.SessionMode
		if mode == "" {
			mode = "ReadWrite" // the API's default, and what the SDK asks for
		}
		return []Request{{Action: "s3express:CreateSession", Resource: bucketARN,
			Keys: map[string]string{"s3express:SessionMode": mode}, Origin: "store CreateSession (inside the SDK)"}}
	case "GetObject", "HeadObject", "PutObject", "DeleteObject", "ListObjectsV2":
		return nil // session-authorized
	}
	return []Request{{Action: "s3express:" + c.Op, Resource: bucketARN, Origin: "store " + c.Op}}
}

// TestExpressSessionPermissions opens the store on the module's directory
// bucket (express_one_zone_az_id set) and drives the calls a node makes
// (the start-up listing, PUT, GET, HEAD, list, DELETE) through the SDK
// with the recording middleware; every call is evaluated against the
// nodes' policy parsed from iam.tf. It proves the SDK makes
// s3express:CreateSession itself (and signs every object call with the
// session's token), and that the policy grants it on the directory
// bucket's ARN: without the ExpressSession statement the test fails.
//
// AWS's zonal endpoint is not available here and MinIO has no directory
// buckets, so the endpoint is an in-memory stand-in behind the store's
// Transport option: it answers CreateSession with a session and keeps
// objects in a map. What is under test is which calls the SDK makes and
// what the policy says of them, not S3's storage.
func TestExpressSessionPermissions(t *testing.T) {
	const az = "use1-az4"
	vars := map[string]cty.Value{"name": cty.StringVal("test"), "express_one_zone_az_id": cty.StringVal(az)}
	e := awsEvaluator(t, vars, "test-segments", 0)
	policy, err := e.Policy("nodes")
	if err != nil {
		t.Fatal(err)
	}
	bucket := "test--" + az + "--x-s3" // s3.tf: "${var.name}--${az}--x-s3"
	bucketARN := "arn:aws:s3express:" + testRegion + ":" + testAccount + ":bucket/" + bucket

	fake := &expressEndpoint{bucket: bucket, objects: map[string][]byte{}}
	log := &callLog{}
	ctx := t.Context()
	s, err := s3store.New(ctx, s3store.Options{Bucket: bucket, Prefix: "test", Region: testRegion,
		AccessKey: "AKIDEXAMPLE", SecretKey: "secret", Transport: fake,
		APIOptions: []func(*middleware.Stack) error{log.option}})
	if err != nil {
		t.Fatalf("open the store on %s: %v", bucket, err)
	}
	defer s.Close()
	w, err := s.Create(ctx, "streams/1/seg-0", objstore.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("segment bytes")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("put: %v", err)
	}
	buf := make([]byte, 5)
	if n, err := s.ReadAt(ctx, "streams/1/seg-0", buf, 8); err != nil || string(buf[:n]) != "bytes" {
		t.Fatalf("read: %q, %v", buf[:n], err)
	}
	if _, err := s.Stat(ctx, "streams/1/seg-0"); err != nil {
		t.Fatalf("stat: %v", err)
	}
	listed := 0
	for _, err := range s.List(ctx, "streams/") {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		listed++
	}
	if listed != 1 {
		t.Errorf("listed %d objects, want 1", listed)
	}
	if err := s.Delete(ctx, "streams/1/seg-0"); err != nil {
		t.Fatalf("delete: %v", err)
	}

	ops := map[string]int{}
	for _, c := range log.calls {
		ops[c.Op]++
		if c.Bucket != bucket {
			t.Errorf("%s on bucket %q, not the directory bucket", c.Op, c.Bucket)
		}
		for _, r := range expressRequests(c, bucketARN) {
			if sid, ok := Allowed(policy, r); !ok {
				t.Errorf("denied by the nodes' policy: %v", r)
			} else {
				t.Logf("%v: allowed by %s", r, sid)
			}
		}
	}
	t.Logf("calls: %v", ops)
	if ops["CreateSession"] == 0 {
		t.Error("the SDK made no CreateSession call: the directory bucket was not used with session authentication")
	}
	for _, op := range []string{"PutObject", "GetObject", "ListObjectsV2", "DeleteObject"} {
		if ops[op] == 0 {
			t.Errorf("no %s call recorded", op)
		}
	}
	if n := fake.unsessioned(); n > 0 {
		t.Errorf("%d object calls without the session token (x-amz-s3session-token)", n)
	}
	// The session must not be granted by anything broader: the same
	// request on another directory bucket is denied.
	other := Request{Action: "s3express:CreateSession", Resource: "arn:aws:s3express:" + testRegion + ":" + testAccount + ":bucket/other--" + az + "--x-s3",
		Keys: map[string]string{"s3express:SessionMode": "ReadWrite"}, Origin: "another bucket"}
	if sid, ok := Allowed(policy, other); ok {
		t.Errorf("%v allowed by %s", other, sid)
	}
	// Without a directory bucket the statement is gone.
	e = awsEvaluator(t, map[string]cty.Value{"name": cty.StringVal("test")}, "test-segments", 0)
	regional, err := e.Policy("nodes")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range regional {
		for _, a := range st.Actions {
			if strings.HasPrefix(a, "s3express:") {
				t.Errorf("statement %s grants %s without a directory bucket", st.Sid, a)
			}
		}
	}
}

// expressEndpoint stands in for a directory bucket's zonal endpoint: it
// hands out a session on GET /?session and keeps objects in memory.
type expressEndpoint struct {
	bucket  string
	mu      sync.Mutex
	objects map[string][]byte
	noToken int
}

func (f *expressEndpoint) unsessioned() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.noToken
}

func (f *expressEndpoint) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		body = b
		r.Body.Close()
	}
	resp := func(status int, hdr http.Header, b string) (*http.Response, error) {
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr.Set("Content-Length", fmt.Sprint(len(b)))
		return &http.Response{StatusCode: status, Header: hdr, Body: io.NopCloser(strings.NewReader(b)),
			ContentLength: int64(len(b)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}, nil
	}
	if !strings.HasPrefix(r.URL.Host, f.bucket+".s3express-") {
		return resp(400, nil, "<Error><Code>InvalidRequest</Code><Message>not the zonal endpoint: "+r.URL.Host+"</Message></Error>")
	}
	q := r.URL.Query()
	if _, ok := q["session"]; ok && r.Method == http.MethodGet {
		exp := time.Now().Add(5 * time.Minute).UTC().Format(time.RFC3339)
		return resp(200, http.Header{"Content-Type": {"application/xml"}}, `<?xml version="1.0" encoding="UTF-8"?>`+
			`<CreateSessionResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Credentials>`+
			`<SessionToken>session-token</SessionToken><SecretAccessKey>session-secret</SecretAccessKey>`+
			`<AccessKeyId>ASIASESSION</AccessKeyId><Expiration>`+exp+`</Expiration></Credentials></CreateSessionResult>`)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("X-Amz-S3session-Token") != "session-token" {
		f.noToken++
	}
	key := strings.TrimPrefix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodGet && q.Get("list-type") == "2":
		prefix := q.Get("prefix")
		var keys []string
		for k := range f.objects {
			if strings.HasPrefix(k, prefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var b bytes.Buffer
		b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		fmt.Fprintf(&b, "<Name>%s</Name><Prefix>%s</Prefix><KeyCount>%d</KeyCount><IsTruncated>false</IsTruncated>", f.bucket, prefix, len(keys))
		for _, k := range keys {
			fmt.Fprintf(&b, "<Contents><Key>%s</Key><Size>%d</Size><LastModified>2026-12-04T00:00:00.000Z</LastModified></Contents>", k, len(f.objects[k]))
		}
		b.WriteString("</ListBucketResult>")
		return resp(200, http.Header{"Content-Type": {"application/xml"}}, b.String())
	case r.Method == http.MethodPut:
		if strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
			body = dechunk(body) // the SDK sends the CRC32C as a trailer
		}
		f.objects[key] = body
		return resp(200, http.Header{"Etag": {`"e"`}}, "")
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		v, ok := f.objects[key]
		if !ok {
			return resp(404, nil, "<Error><Code>NoSuchKey</Code></Error>")
		}
		hdr := http.Header{"Etag": {`"e"`}, "Last-Modified": {"Fri, 04 Dec 2026 00:00:00 GMT"}}
		if rg := r.Header.Get("Range"); rg != "" && r.Method == http.MethodGet {
			var from, to int
			if _, err := fmt.Sscanf(rg, "bytes=%d-%d", &from, &to); err == nil && from < len(v) {
				to = min(to, len(v)-1)
				hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(v)))
				return resp(206, hdr, string(v[from:to+1]))
			}
		}
		if r.Method == http.MethodHead {
			hdr.Set("Content-Length", fmt.Sprint(len(v)))
			return &http.Response{StatusCode: 200, Header: hdr, Body: http.NoBody, ContentLength: int64(len(v)), Request: r}, nil
		}
		return resp(200, hdr, string(v))
	case r.Method == http.MethodDelete:
		delete(f.objects, key)
		return resp(204, nil, "")
	}
	return resp(400, nil, "<Error><Code>NotImplemented</Code></Error>")
}

// dechunk reads an aws-chunked body ("<hex size>\r\n<data>\r\n" ...,
// "0\r\n" and trailers) back into its data.
func dechunk(b []byte) []byte {
	var out []byte
	for {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		if !ok {
			return out
		}
		size, _, _ := strings.Cut(string(line), ";")
		var n int
		if _, err := fmt.Sscanf(size, "%x", &n); err != nil || n == 0 || n > len(rest) {
			return out
		}
		out = append(out, rest[:n]...)
		b = bytes.TrimPrefix(rest[n:], []byte("\r\n"))
	}
}
