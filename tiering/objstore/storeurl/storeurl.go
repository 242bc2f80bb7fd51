// Package storeurl opens the object store a URL names: the composition
// root's (node, cmd, e2e, tests) one way to get an objstore.Store. It is
// the only package that knows every implementation, so that the packages
// that use a Store link neither the AWS SDK nor a choice of store.
//
// # URLs
//
//	file:///abs/path                  a directory (created if missing)
//	file://relative/path              relative to the working directory
//	s3://bucket[/prefix]?endpoint=http://127.0.0.1:9000&region=us-east-1
//
// s3 query parameters: endpoint (host[:port] or a URL whose scheme picks
// TLS; default the AWS endpoint of the region), region (default the SDK's:
// AWS_REGION or the shared config; else us-east-1),
// path_style (default true when an endpoint is given, as MinIO and most
// S3-compatible servers need), sse (AES256 for SSE-S3 or aws:kms for
// SSE-KMS; default: the bucket's default encryption) and sse_kms_key_id.
// A bucket named "name--zoneid--x-s3" is an S3 Express One Zone directory
// bucket. Credentials come from the AWS SDK's default chain (environment,
// web identity, shared config and AWS_PROFILE with assume-role, then the
// container or instance role over IMDSv2), never from the URL, so a URL
// can be logged. A prefix scopes every key, which lets
// several clusters or test runs share one bucket.
package storeurl

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/s3"
)

// Option adjusts how Open connects to a remote store.
type Option func(*s3.Options)

// WithRootCAs verifies an https S3 endpoint against pool instead of the
// system roots (a private CA).
func WithRootCAs(pool *x509.CertPool) Option {
	return func(o *s3.Options) { o.RootCAs = pool }
}

// Open opens the store a URL names (see the package documentation). It
// may do I/O: the S3 store checks that its bucket exists, so a wrong
// endpoint, bucket or credential fails here rather than at the first upload.
func Open(ctx context.Context, rawURL string, opts ...Option) (objstore.Store, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("objstore: %q: want file:///path or s3://bucket?endpoint=…", rawURL)
	}
	switch scheme {
	case "file":
		// Everything after "file://" is the path, so that both the RFC form
		// file:///abs and the common file://./rel mean what they say.
		path, err := url.PathUnescape(rest)
		if err != nil || path == "" {
			return nil, fmt.Errorf("objstore: %q: bad file path", rawURL)
		}
		return objstore.NewFileStore(path)
	case "s3":
		s3opts, err := s3.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		for _, o := range opts {
			o(&s3opts)
		}
		return s3.New(ctx, s3opts)
	default:
		return nil, fmt.Errorf("objstore: %q: unknown scheme %q (want file or s3)", rawURL, scheme)
	}
}
