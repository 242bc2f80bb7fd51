// Package s3 is the object store on S3 and S3-compatible services (MinIO
// in the tests), through the AWS SDK for Go v2. It lives apart from the
// objstore interface package so that what uses a Store (tiering, the stream
// service, the frontends above it) does not link the AWS SDK; only the
// composition root opens one, through storeurl (internal/layers checks it).
// It passes the same acceptance suite (objstoretest) as the file store.
package s3

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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/PicoMQ/picomq/tiering/objstore"
)

// Options configure a Store. Zero values are the defaults stated on
// each field.
type Options struct {
	// Bucket is required; it must exist. A name ending in "--x-s3" is an S3
	// Express One Zone directory bucket (see DirectoryBucket).
	Bucket string
	// Prefix scopes every key (without leading or trailing '/'; "" = none).
	Prefix string
	// Endpoint is host[:port], or a URL whose scheme chooses TLS (http://
	// for a loopback MinIO). Default: the AWS endpoint of Region.
	Endpoint string
	// Region defaults to the SDK's (AWS_REGION or the shared config), else
	// us-east-1.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// instead of the host name; MinIO and most S3-compatible servers need
	// it. Default: true when Endpoint is set, false for AWS.
	PathStyle *bool
	// SSE asks S3 to encrypt each object at rest: "" (the bucket's default
	// encryption decides), "AES256" (SSE-S3) or "aws:kms" (SSE-KMS, with
	// SSEKMSKeyID or the account's aws/s3 key).
	SSE string
	// SSEKMSKeyID is the KMS key (ID, ARN or alias ARN) for SSE "aws:kms".
	SSEKMSKeyID string
	// AccessKey, SecretKey and SessionToken are static credentials; when
	// AccessKey is empty the SDK's default chain is used: environment,
	// web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN), shared
	// config/credentials files and AWS_PROFILE (assume-role profiles
	// included), then the ECS container or EC2 instance role (IMDSv2).
	AccessKey, SecretKey, SessionToken string
	// MaxAttempts bounds the SDK's own attempts of one request (default 3),
	// paced by its adaptive retry mode (client-side rate limiting on
	// throttling). Callers that need patience (the uploader) retry on top
	// with their own backoff.
	MaxAttempts int
	// Transport overrides the HTTP transport (tests, proxies).
	Transport http.RoundTripper
	// APIOptions are added to the SDK client's middleware stacks (the
	// permission test in terraform/tests records every call this way).
	APIOptions []func(*middleware.Stack) error
	// RootCAs verifies an https endpoint (default: the system roots, or
	// AWS_CA_BUNDLE); --s3-ca sets it.
	RootCAs *x509.CertPool
}

// Store is an objstore.Store on S3 or an S3-compatible service, through the AWS
// SDK for Go v2 — the one production S3 path.
//
// Create buffers the object in memory and sends it as one PUT in Close:
// a single PUT is atomic on every S3 implementation, and it is the request
// that carries "If-None-Match: *" for a conditional create (conditional
// multipart completion is not universally supported). Tiering's objects are
// segment-sized (MiBs), well under the 5 GiB single-PUT limit. Every PUT
// carries a CRC32C checksum that S3 verifies before it stores the object.
type Store struct {
	client    *awss3.Client
	transport atomic.Pointer[http.Transport] // the SDK-built one, once used
	bucket    string
	prefix    string // "" or "p/" with the trailing slash
	desc      string
	sse       types.ServerSideEncryption
	kmsKey    *string
	// directory: an S3 Express One Zone directory bucket, whose listings
	// are not in key order and whose list prefixes must end in '/'.
	directory bool
}

var (
	_ objstore.Store         = (*Store)(nil)
	_ objstore.RangeStreamer = (*Store)(nil)
)

// s3Params are the query parameters an s3:// URL may carry.
const s3Params = "endpoint, region, path_style, sse, sse_kms_key_id"

// ParseURL reads an s3:// URL (storeurl documents its form) into Options.
// Credentials in the URL are refused, so that a URL can be logged.
func ParseURL(raw string) (Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Options{}, fmt.Errorf("objstore: %q: %w", raw, err)
	}
	if u.Host == "" {
		return Options{}, fmt.Errorf("objstore: %q: missing bucket (s3://bucket?endpoint=…)", raw)
	}
	if u.User != nil {
		return Options{}, fmt.Errorf("objstore: %q: credentials do not belong in the URL; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an instance role", u.Redacted())
	}
	opts := Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
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
				return Options{}, fmt.Errorf("objstore: %q: path_style=%q: want true or false", raw, val)
			}
			opts.PathStyle = &b
		case "sse":
			opts.SSE = val
		case "sse_kms_key_id":
			opts.SSEKMSKeyID = val
		default:
			return Options{}, fmt.Errorf("objstore: %q: unknown parameter %q (known: %s)", raw, k, s3Params)
		}
	}
	return opts, nil
}

// DirectoryBucket reports whether bucket names an S3 Express One Zone
// directory bucket ("name--zoneid--x-s3").
func DirectoryBucket(bucket string) bool { return strings.HasSuffix(bucket, "--x-s3") }

// New connects to the bucket and checks that it exists.
func New(ctx context.Context, o Options) (*Store, error) {
	if o.Bucket == "" {
		return nil, errors.New("objstore: s3: bucket is required")
	}
	if o.Prefix != "" {
		if err := objstore.ValidateKey(o.Prefix); err != nil {
			return nil, fmt.Errorf("objstore: s3 prefix: %w", err)
		}
	}
	s := &Store{bucket: o.Bucket, directory: DirectoryBucket(o.Bucket)}
	switch o.SSE {
	case "":
	case string(types.ServerSideEncryptionAes256), string(types.ServerSideEncryptionAwsKms):
		s.sse = types.ServerSideEncryption(o.SSE)
	default:
		return nil, fmt.Errorf("objstore: s3 sse=%q: want AES256 or aws:kms", o.SSE)
	}
	if o.SSEKMSKeyID != "" {
		if s.sse != types.ServerSideEncryptionAwsKms {
			return nil, errors.New("objstore: s3 sse_kms_key_id needs sse=aws:kms")
		}
		s.kmsKey = aws.String(o.SSEKMSKeyID)
	}
	endpoint := ""
	if o.Endpoint != "" {
		endpoint = o.Endpoint
		if !strings.Contains(endpoint, "://") {
			endpoint = "https://" + endpoint
		}
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("objstore: s3 endpoint %q: want host[:port] or http(s)://host[:port]", o.Endpoint)
		}
	}
	pathStyle := endpoint != ""
	if o.PathStyle != nil {
		pathStyle = *o.PathStyle
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 3
	}
	// Parallel block reads and prefetches share one host: keep enough
	// idle connections that read-ahead does not redial. The SDK's own
	// client type is what lets AWS_CA_BUNDLE apply; the callback records
	// the transport it builds so that Close can release its connections.
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = 64
		s.transport.Store(t)
	})
	loadOpts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			r := retry.NewAdaptiveMode(func(ao *retry.AdaptiveModeOptions) {
				ao.StandardOptions = append(ao.StandardOptions, func(so *retry.StandardOptions) {
					so.MaxAttempts = o.MaxAttempts
				})
			})
			// Two conditional writes of one key racing on AWS: the loser may
			// get 409 instead of 412; its retry then sees 412 (objstore.ErrExists).
			return retry.AddWithErrorCodes(r, "ConditionalRequestConflict")
		}),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.AccessKey != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKey, o.SecretKey, o.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3: AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	s3HTTP := cfg.HTTPClient
	if bc, ok := s3HTTP.(*awshttp.BuildableClient); ok && o.RootCAs != nil {
		// After AWS_CA_BUNDLE's option, so an explicit --s3-ca wins; only
		// for S3 (the credential providers keep the usual roots).
		s3HTTP = bc.WithTransportOptions(func(t *http.Transport) {
			if t.TLSClientConfig == nil {
				t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			t.TLSClientConfig.RootCAs = o.RootCAs
		})
	}
	s.client = awss3.NewFromConfig(cfg, func(so *awss3.Options) {
		so.HTTPClient = s3HTTP
		so.APIOptions = append(so.APIOptions, o.APIOptions...)
		if o.Transport != nil {
			so.HTTPClient = &http.Client{Transport: o.Transport}
		}
		if endpoint != "" {
			so.BaseEndpoint = aws.String(endpoint)
		}
		so.UsePathStyle = pathStyle
		// Every PUT carries a checksum S3 verifies; reads are checked by the
		// segment format's own CRCs (a ranged GET has no object checksum).
		so.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenSupported
		so.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	host := endpoint
	if host == "" {
		host = "awss3." + cfg.Region
	}
	s.desc = strings.TrimPrefix(strings.TrimPrefix(host, "https://"), "http://") + "/" + o.Bucket
	if o.Prefix != "" {
		s.prefix = o.Prefix + "/"
		s.desc += "/" + o.Prefix
	}
	if err := s.probe(ctx); err != nil {
		if errors.Is(err, objstore.ErrNotExist) {
			err = fmt.Errorf("objstore: s3 %s: bucket %q: %w", host, o.Bucket, err)
		}
		// The settings parsed; S3 did not answer yes. A network, an IAM
		// role or a bucket can all be ready a minute later.
		return nil, fmt.Errorf("%w: %w", objstore.ErrUnavailable, err)
	}
	return s, nil
}

// probe proves the bucket answers with the permissions tiering uses: one
// listing of at most one key under the store's prefix. HeadBucket would
// need s3:ListBucket without a prefix condition, which a policy scoped to
// the prefix (terraform/modules/aws/iam.tf) rightly does not grant.
func (s *Store) probe(ctx context.Context) error {
	in := &awss3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(1)}
	if s.prefix != "" {
		in.Prefix = aws.String(s.prefix)
	}
	if _, err := s.client.ListObjectsV2(ctx, in); err != nil {
		return s.mapErr("open", "", err)
	}
	return nil
}

// String describes the store for logs (no credentials).
func (s *Store) String() string { return "s3://" + s.desc }

// get issues one ranged GET of [off, off+length). empty is true when the
// range starts at or past the end of the object (HTTP 416).
func (s *Store) get(ctx context.Context, key string, off, length int64) (out *awss3.GetObjectOutput, empty bool, err error) {
	out, err = s.client.GetObject(ctx, &awss3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.prefix + key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
	})
	if err != nil {
		if code, status := apiError(err); code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable {
			return nil, true, nil
		}
		return nil, false, s.mapErr("read", key, err)
	}
	return out, false, nil
}

// ReadAt is part of the objstore.Store interface. It is one ranged GET.
func (s *Store) ReadAt(ctx context.Context, key string, p []byte, off int64) (int, error) {
	if err := objstore.ValidateRange(key, off, int64(len(p))); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	out, empty, err := s.get(ctx, key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	if empty {
		return 0, io.EOF // off is at or past the end
	}
	body := out.Body
	defer body.Close()
	// How many bytes the server promised: the range it chose, from
	// Content-Range, so a connection cut short is an error, not an EOF.
	start, want, _, ok := parseContentRange(aws.ToString(out.ContentRange))
	if !ok {
		// 200 with the whole object: the server ignored the range.
		// Where it said how long the object is, a body that ends
		// before that was cut (an error), not the object's end.
		size := wholeSize(out)
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			if err == io.EOF && (size < 0 || off >= size) {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("objstore: read %q: skipping to %d: %w", key, off, cutShort(err))
		}
		n, err := io.ReadFull(body, p)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if size < 0 || off+int64(n) >= size {
				return n, io.EOF
			}
			return n, fmt.Errorf("objstore: read %q: body ended at %d of %d bytes: %w", key, off+int64(n), size, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return n, fmt.Errorf("objstore: read %q: %w", key, cutShort(err))
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

// ReadRange is part of the objstore.RangeStreamer interface. It is one ranged GET
// whose body is handed over as it arrives.
func (s *Store) ReadRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := objstore.ValidateRange(key, off, length); err != nil {
		return nil, err
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	out, empty, err := s.get(ctx, key, off, length)
	if err != nil {
		return nil, err
	}
	if empty {
		return io.NopCloser(strings.NewReader("")), nil
	}
	body := out.Body
	start, want, _, ok := parseContentRange(aws.ToString(out.ContentRange))
	if !ok {
		// The server ignored the range: skip to off, stop after length.
		// Where it said how long the object is, the body must run on to
		// off+length or the object's end; shorter was cut.
		size := wholeSize(out)
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			body.Close()
			if err == io.EOF && (size < 0 || off >= size) {
				return io.NopCloser(strings.NewReader("")), nil
			}
			return nil, fmt.Errorf("objstore: read %q: skipping to %d: %w", key, off, cutShort(err))
		}
		if size < 0 {
			return struct {
				io.Reader
				io.Closer
			}{io.LimitReader(body, length), body}, nil
		}
		return &exactBody{rc: body, left: max(min(length, size-off), 0), key: key}, nil
	}
	if start != off || want > length {
		body.Close()
		return nil, fmt.Errorf("objstore: read %q: server sent range %d+%d for request %d+%d", key, start, want, off, length)
	}
	return &exactBody{rc: body, left: want, key: key}, nil
}

// wholeSize is the object's size as a GET answered with the whole
// object says (its Content-Length), or -1 when it does not say.
func wholeSize(out *awss3.GetObjectOutput) int64 {
	if out.ContentLength == nil || *out.ContentLength < 0 {
		return -1
	}
	return *out.ContentLength
}

// cutShort turns an io.EOF that ended a body early into
// io.ErrUnexpectedEOF, so nothing above takes it for the object's end.
func cutShort(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
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

// Stat is part of the objstore.Store interface.
func (s *Store) Stat(ctx context.Context, key string) (objstore.Attributes, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.Attributes{}, err
	}
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		return objstore.Attributes{}, s.mapErr("stat", key, err)
	}
	return objstore.Attributes{Key: key, Size: aws.ToInt64(out.ContentLength), LastModified: aws.ToTime(out.LastModified)}, nil
}

// List is part of the objstore.Store interface.
//
// A directory bucket lists only prefixes that end in '/', and not in key
// order: there the listing covers the prefix's directory, is filtered to
// the prefix and sorted before it is yielded.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Attributes, error] {
	return func(yield func(objstore.Attributes, error) bool) {
		if err := objstore.ValidatePrefix(prefix); err != nil {
			yield(objstore.Attributes{}, err)
			return
		}
		full := s.prefix + prefix
		listPrefix := full
		if s.directory {
			listPrefix = full[:strings.LastIndexByte(full, '/')+1]
		}
		var sorted []objstore.Attributes
		p := awss3.NewListObjectsV2Paginator(s.client, &awss3.ListObjectsV2Input{
			Bucket: aws.String(s.bucket), Prefix: aws.String(listPrefix),
		})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(objstore.Attributes{}, s.mapErr("list", prefix, err))
				return
			}
			for _, o := range page.Contents {
				k := aws.ToString(o.Key)
				if !strings.HasPrefix(k, full) {
					continue
				}
				a := objstore.Attributes{Key: strings.TrimPrefix(k, s.prefix), Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)}
				if s.directory {
					sorted = append(sorted, a)
				} else if !yield(a, nil) {
					return
				}
			}
		}
		slices.SortFunc(sorted, func(a, b objstore.Attributes) int { return strings.Compare(a.Key, b.Key) })
		for _, a := range sorted {
			if !yield(a, nil) {
				return
			}
		}
	}
}

// Delete is part of the objstore.Store interface.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.prefix + key)})
	if err != nil {
		if err := s.mapErr("delete", key, err); !errors.Is(err, objstore.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Create is part of the objstore.Store interface.
func (s *Store) Create(ctx context.Context, key string, opts objstore.CreateOptions) (objstore.Writer, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &s3Writer{ctx: ctx, key: key, opts: opts, s: s}, nil
}

// Close is part of the objstore.Store interface.
func (s *Store) Close() error {
	if t := s.transport.Load(); t != nil {
		t.CloseIdleConnections()
	}
	return nil
}

// apiError returns the S3 error code and HTTP status of err ("" and 0 when
// the request never got a response).
func apiError(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func (s *Store) mapErr(op, key string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		// The SDK wraps a connection closed before (or while) the answer
		// came in around io.EOF ("request send failed ...: EOF"). Passed
		// on as it is, that reads as "the object ends here" to every
		// io.ReaderAt caller: the block cache kept an empty GET as the
		// object's end and reads of the range failed as a truncated,
		// corrupt object. The cause is kept in the text, not the chain.
		return fmt.Errorf("objstore: %s %q on %s: %w: connection closed: %v", op, key, s, objstore.ErrUnavailable, err)
	}
	code, status := apiError(err)
	switch {
	case code == "NoSuchKey" || code == "NoSuchBucket" || code == "NotFound" || status == http.StatusNotFound:
		return fmt.Errorf("objstore: %s %q on %s: %w (%s)", op, key, s, objstore.ErrNotExist, code)
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return fmt.Errorf("objstore: %s %q on %s: %w", op, key, s, objstore.ErrExists)
	case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
		code == "ExpiredToken" || code == "InvalidToken" || status == http.StatusForbidden:
		return fmt.Errorf("objstore: %s %q on %s: %w: %v", op, key, s, objstore.ErrPermission, err)
	}
	return fmt.Errorf("objstore: %s %q on %s: %w", op, key, s, err)
}

// s3Writer buffers an object until Close sends it as one PUT.
type s3Writer struct {
	ctx  context.Context
	key  string
	opts objstore.CreateOptions
	done bool // closed or aborted
	s    *Store
	buf  bytes.Buffer
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, objstore.ErrClosed
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
		return objstore.ErrClosed
	}
	w.done = true
	data := w.buf.Bytes()
	w.buf = bytes.Buffer{}
	in := &awss3.PutObjectInput{
		Bucket:               aws.String(w.s.bucket),
		Key:                  aws.String(w.s.prefix + w.key),
		Body:                 bytes.NewReader(data),
		ContentLength:        aws.Int64(int64(len(data))),
		ContentType:          aws.String("application/octet-stream"),
		ChecksumAlgorithm:    types.ChecksumAlgorithmCrc32c,
		ServerSideEncryption: w.s.sse,
		SSEKMSKeyId:          w.s.kmsKey,
	}
	if w.opts.IfNotExists {
		in.IfNoneMatch = aws.String("*")
	}
	if _, err := w.s.client.PutObject(w.ctx, in); err != nil {
		return w.s.mapErr("commit", w.key, err)
	}
	return nil
}
