package objstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Options configure an S3Store. Zero values are the defaults stated on
// each field.
type S3Options struct {
	// Bucket is required; it must exist.
	Bucket string
	// Prefix scopes every key (without leading or trailing '/'; "" = none).
	Prefix string
	// Endpoint is host[:port], or a URL whose scheme chooses TLS (http://
	// for a loopback MinIO). Default: AWS S3 over TLS.
	Endpoint string
	// Region defaults to us-east-1.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// instead of the host name; MinIO and most S3-compatible servers need
	// it. Default: true when Endpoint is set, automatic for AWS.
	PathStyle *bool
	// AccessKey, SecretKey and SessionToken are static credentials; when
	// AccessKey is empty the standard AWS chain is used (environment, shared
	// credentials file and AWS_PROFILE, instance/container role).
	AccessKey, SecretKey, SessionToken string
	// MaxRetries bounds minio-go's own quick retries of one request
	// (default 3). Callers that need patience (the uploader) retry on top
	// with their own backoff.
	MaxRetries int
	// Transport overrides the HTTP transport (tests, proxies).
	Transport http.RoundTripper
	// RootCAs verifies an https endpoint (default: the system roots).
	RootCAs *x509.CertPool
}

// S3Store is a Store on an S3-compatible service.
//
// Create buffers the object in memory and sends it as one PUT in Close:
// a single PUT is atomic on every S3 implementation, and it is the request
// that carries "If-None-Match: *" for a conditional create (conditional
// multipart completion is not universally supported). Tiering's objects are
// segment-sized (MiBs), well under the 5 GiB single-PUT limit.
type S3Store struct {
	client    *minio.Client
	core      minio.Core
	transport http.RoundTripper
	bucket    string
	prefix    string // "" or "p/" with the trailing slash
	desc      string
}

var (
	_ Store         = (*S3Store)(nil)
	_ RangeStreamer = (*S3Store)(nil)
)

func parseS3URL(raw string) (S3Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return S3Options{}, fmt.Errorf("objstore: %q: %w", raw, err)
	}
	if u.Host == "" {
		return S3Options{}, fmt.Errorf("objstore: %q: missing bucket (s3://bucket?endpoint=…)", raw)
	}
	if u.User != nil {
		return S3Options{}, fmt.Errorf("objstore: %q: credentials do not belong in the URL; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile", u.Redacted())
	}
	opts := S3Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	for k, v := range u.Query() {
		val := v[len(v)-1]
		switch k {
		case "endpoint":
			opts.Endpoint = val
		case "region":
			opts.Region = val
		case "path_style":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return S3Options{}, fmt.Errorf("objstore: %q: path_style=%q: want true or false", raw, val)
			}
			opts.PathStyle = &b
		default:
			return S3Options{}, fmt.Errorf("objstore: %q: unknown parameter %q (known: endpoint, region, path_style)", raw, k)
		}
	}
	return opts, nil
}

// NewS3Store connects to the bucket and checks that it exists.
func NewS3Store(ctx context.Context, o S3Options) (*S3Store, error) {
	if o.Bucket == "" {
		return nil, errors.New("objstore: s3: bucket is required")
	}
	if o.Prefix != "" {
		if err := ValidateKey(o.Prefix); err != nil {
			return nil, fmt.Errorf("objstore: s3 prefix: %w", err)
		}
	}
	host, secure := "s3.amazonaws.com", true
	lookup := minio.BucketLookupAuto
	if o.Endpoint != "" {
		host = o.Endpoint
		if strings.Contains(o.Endpoint, "://") {
			u, err := url.Parse(o.Endpoint)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				return nil, fmt.Errorf("objstore: s3 endpoint %q: want host[:port] or http(s)://host[:port]", o.Endpoint)
			}
			host, secure = u.Host, u.Scheme == "https"
		}
		lookup = minio.BucketLookupPath
	}
	if o.PathStyle != nil {
		lookup = minio.BucketLookupDNS
		if *o.PathStyle {
			lookup = minio.BucketLookupPath
		}
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 3
	}
	transport := o.Transport
	if transport == nil {
		t, err := minio.DefaultTransport(secure)
		if err != nil {
			return nil, fmt.Errorf("objstore: s3 %s: %w", host, err)
		}
		// Parallel block reads and prefetches share one host: keep enough
		// idle connections that read-ahead does not redial.
		t.MaxIdleConnsPerHost = 64
		if o.RootCAs != nil {
			if t.TLSClientConfig == nil {
				t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			t.TLSClientConfig.RootCAs = o.RootCAs
		}
		transport = t
	}
	var creds *credentials.Credentials
	if o.AccessKey != "" {
		creds = credentials.NewStaticV4(o.AccessKey, o.SecretKey, o.SessionToken)
	} else {
		creds = credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{},
			&credentials.IAM{},
		})
	}
	client, err := minio.New(host, &minio.Options{
		Creds:        creds,
		Secure:       secure,
		Region:       o.Region,
		BucketLookup: lookup,
		MaxRetries:   o.MaxRetries,
		Transport:    transport,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: s3 %s: %w", host, err)
	}
	s := &S3Store{client: client, core: minio.Core{Client: client}, transport: transport, bucket: o.Bucket, desc: host + "/" + o.Bucket}
	if o.Prefix != "" {
		s.prefix = o.Prefix + "/"
		s.desc += "/" + o.Prefix
	}
	ok, err := client.BucketExists(ctx, o.Bucket)
	if err != nil {
		return nil, s.mapErr("open", "", err)
	}
	if !ok {
		return nil, fmt.Errorf("objstore: s3 %s: bucket %q: %w", host, o.Bucket, ErrNotExist)
	}
	return s, nil
}

// String describes the store for logs (no credentials).
func (s *S3Store) String() string { return "s3://" + s.desc }

// ReadAt is part of the Store interface. It is one ranged GET.
func (s *S3Store) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := ValidateKey(key); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, fmt.Errorf("objstore: read %q: negative offset %d", key, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return 0, fmt.Errorf("objstore: read %q: %w", key, err)
	}
	body, _, hdr, err := s.core.GetObject(ctx, s.bucket, s.prefix+key, opts)
	if err != nil {
		var er minio.ErrorResponse
		if errors.As(err, &er) && (er.Code == "InvalidRange" || er.StatusCode == http.StatusRequestedRangeNotSatisfiable) {
			return 0, io.EOF // off is at or past the end
		}
		return 0, s.mapErr("read", key, err)
	}
	defer body.Close()
	// How many bytes the server promised: the range it chose, from
	// Content-Range, so a connection cut short is an error, not an EOF.
	start, want, _, ok := parseContentRange(hdr.Get("Content-Range"))
	if !ok {
		// 200 with the whole object: the server ignored the range.
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("objstore: read %q: %w", key, err)
		}
		n, err := io.ReadFull(body, p)
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return n, io.EOF
		}
		if err != nil {
			return n, fmt.Errorf("objstore: read %q: %w", key, err)
		}
		return n, nil
	}
	if start != off || want > int64(len(p)) {
		return 0, fmt.Errorf("objstore: read %q: server sent range %d+%d for request %d+%d", key, start, want, off, len(p))
	}
	n, err := io.ReadFull(body, p[:want])
	if err != nil {
		return n, fmt.Errorf("objstore: read %q: %d of %d bytes: %w", key, n, want, io.ErrUnexpectedEOF)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// ReadRange is part of the RangeStreamer interface. It is one ranged GET
// whose body is handed over as it arrives.
func (s *S3Store) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if off < 0 || length < 0 {
		return nil, fmt.Errorf("objstore: read %q: negative offset or length", key)
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+length-1); err != nil {
		return nil, fmt.Errorf("objstore: read %q: %w", key, err)
	}
	body, _, hdr, err := s.core.GetObject(ctx, s.bucket, s.prefix+key, opts)
	if err != nil {
		var er minio.ErrorResponse
		if errors.As(err, &er) && (er.Code == "InvalidRange" || er.StatusCode == http.StatusRequestedRangeNotSatisfiable) {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, s.mapErr("read", key, err)
	}
	start, want, _, ok := parseContentRange(hdr.Get("Content-Range"))
	if !ok {
		// The server ignored the range: skip to off, stop after length.
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			body.Close()
			if errors.Is(err, io.EOF) {
				return io.NopCloser(strings.NewReader("")), nil
			}
			return nil, fmt.Errorf("objstore: read %q: %w", key, err)
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(body, length), body}, nil
	}
	if start != off || want > length {
		body.Close()
		return nil, fmt.Errorf("objstore: read %q: server sent range %d+%d for request %d+%d", key, start, want, off, length)
	}
	return &exactBody{rc: body, left: want, key: key}, nil
}

// exactBody turns a body that ends before its Content-Range promised into
// io.ErrUnexpectedEOF.
type exactBody struct {
	rc   io.ReadCloser
	left int64
	key  string
}

func (b *exactBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if errors.Is(err, io.EOF) && b.left > 0 {
		return n, fmt.Errorf("objstore: read %q: body ended %d bytes early: %w", b.key, b.left, io.ErrUnexpectedEOF)
	}
	if err == nil && b.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (b *exactBody) Close() error { return b.rc.Close() }

// parseContentRange parses "bytes first-last/total" into (first, length,
// total).
func parseContentRange(v string) (first, length, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	a, b, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	total, err3 := strconv.ParseInt(tot, 10, 64)
	if tot == "*" {
		total, err3 = -1, nil
	}
	if err1 != nil || err2 != nil || err3 != nil || last < first {
		return 0, 0, 0, false
	}
	return first, last - first + 1, total, true
}

// Stat is part of the Store interface.
func (s *S3Store) Stat(ctx context.Context, key string) (Attributes, error) {
	if err := ValidateKey(key); err != nil {
		return Attributes{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return Attributes{}, s.mapErr("stat", key, err)
	}
	return Attributes{Key: key, Size: info.Size, LastModified: info.LastModified}, nil
}

// List is part of the Store interface.
func (s *S3Store) List(ctx context.Context, prefix string) iter.Seq2[Attributes, error] {
	return func(yield func(Attributes, error) bool) {
		if err := validatePrefix(prefix); err != nil {
			yield(Attributes{}, err)
			return
		}
		// Cancelling stops minio-go's listing goroutine when the caller
		// breaks out early.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for info := range s.client.ListObjectsIter(ctx, s.bucket, minio.ListObjectsOptions{
			Prefix: s.prefix + prefix, Recursive: true,
		}) {
			if info.Err != nil {
				yield(Attributes{}, s.mapErr("list", prefix, info.Err))
				return
			}
			key := strings.TrimPrefix(info.Key, s.prefix)
			if !yield(Attributes{Key: key, Size: info.Size, LastModified: info.LastModified}, nil) {
				return
			}
		}
	}
}

// Delete is part of the Store interface.
func (s *S3Store) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		if err := s.mapErr("delete", key, err); errors.Is(err, ErrNotExist) {
			return nil
		}
		return s.mapErr("delete", key, err)
	}
	return nil
}

// Create is part of the Store interface.
func (s *S3Store) Create(ctx context.Context, key string, opts CreateOptions) (Writer, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &s3Writer{ctx: ctx, s: s, key: key, opts: opts}, nil
}

// Close is part of the Store interface.
func (s *S3Store) Close() error {
	if t, ok := s.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

func (s *S3Store) mapErr(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	var er minio.ErrorResponse
	if errors.As(err, &er) {
		switch {
		case er.Code == "NoSuchKey" || er.Code == "NoSuchBucket" || er.StatusCode == http.StatusNotFound:
			return fmt.Errorf("objstore: %s %q on %s: %w (%s)", op, key, s, ErrNotExist, er.Code)
		case er.Code == "PreconditionFailed" || er.StatusCode == http.StatusPreconditionFailed:
			return fmt.Errorf("objstore: %s %q on %s: %w", op, key, s, ErrExists)
		case er.Code == "AccessDenied" || er.Code == "InvalidAccessKeyId" || er.Code == "SignatureDoesNotMatch" ||
			er.Code == "ExpiredToken" || er.StatusCode == http.StatusForbidden:
			return fmt.Errorf("objstore: %s %q on %s: %w: %s", op, key, s, ErrPermission, er.Message)
		}
		return fmt.Errorf("objstore: %s %q on %s: %s (HTTP %d): %w", op, key, s, er.Code, er.StatusCode, err)
	}
	return fmt.Errorf("objstore: %s %q on %s: %w", op, key, s, err)
}

type s3Writer struct {
	ctx  context.Context
	s    *S3Store
	key  string
	opts CreateOptions
	buf  bytes.Buffer
	done bool
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, ErrClosed
	}
	return w.buf.Write(p)
}

func (w *s3Writer) Abort() error {
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}

func (w *s3Writer) Close() error {
	if w.done {
		return ErrClosed
	}
	w.done = true
	data := w.buf.Bytes()
	w.buf = bytes.Buffer{}
	po := minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}
	if w.opts.IfNotExists {
		po.SetMatchETagExcept("*")
	}
	_, err := w.s.client.PutObject(w.ctx, w.s.bucket, w.s.prefix+w.key, bytes.NewReader(data), int64(len(data)), po)
	if err != nil {
		return w.s.mapErr("commit", w.key, err)
	}
	return nil
}
