package tftests

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	"github.com/zclconf/go-cty/cty"

	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/objstoretest"
	s3store "github.com/PicoMQ/picomq/tiering/objstore/s3"
)

// s3Call is one S3 operation the store made, with the parameters IAM
// looks at.
type s3Call struct {
	Op                  string
	Bucket, Key, Prefix string
	HasPrefix           bool
	SSE                 string // the request's server-side encryption, if any
	SessionMode         string // CreateSession (S3 Express): as asked, "" = the default
}

// callLog records every S3 call of a store through an SDK middleware at
// the Initialize step: the operation and its typed input, as sent
// (retries are the same call).
type callLog struct {
	mu    sync.Mutex
	calls []s3Call
}

func (l *callLog) option(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("picomq-permission-recorder",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c := s3Call{Op: awsmiddleware.GetOperationName(ctx)}
			switch p := in.Parameters.(type) {
			case *awss3.GetObjectInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.HeadObjectInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.PutObjectInput:
				c.Bucket, c.Key, c.SSE = aws.ToString(p.Bucket), aws.ToString(p.Key), string(p.ServerSideEncryption)
			case *awss3.DeleteObjectInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.ListObjectsV2Input:
				c.Bucket, c.Prefix, c.HasPrefix = aws.ToString(p.Bucket), aws.ToString(p.Prefix), p.Prefix != nil
			case *awss3.HeadBucketInput:
				c.Bucket = aws.ToString(p.Bucket)
			case *awss3.CreateMultipartUploadInput:
				c.Bucket, c.Key, c.SSE = aws.ToString(p.Bucket), aws.ToString(p.Key), string(p.ServerSideEncryption)
			case *awss3.UploadPartInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.CompleteMultipartUploadInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.AbortMultipartUploadInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			case *awss3.CreateSessionInput:
				c.Bucket, c.SessionMode = aws.ToString(p.Bucket), string(p.SessionMode)
			case *awss3.CopyObjectInput:
				c.Bucket, c.Key = aws.ToString(p.Bucket), aws.ToString(p.Key)
			default:
				c.Op += " (parameters not modelled)"
			}
			l.mu.Lock()
			l.calls = append(l.calls, c)
			l.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

// iamRequests turns an S3 call into the authorizations AWS checks for it
// (docs: "Actions, resources, and condition keys for Amazon S3"): the S3
// action on the object or bucket ARN with the s3:prefix key for a
// listing, and for SSE-KMS the KMS actions on the key.
func iamRequests(c s3Call, kmsKey string) []Request {
	obj := "arn:aws:s3:::" + c.Bucket + "/" + c.Key
	bucket := "arn:aws:s3:::" + c.Bucket
	origin := "store " + c.Op
	var out []Request
	add := func(action, resource string, keys map[string]string) {
		out = append(out, Request{Action: action, Resource: resource, Keys: keys, Origin: origin})
	}
	switch c.Op {
	case "GetObject", "HeadObject":
		add("s3:GetObject", obj, nil)
		if kmsKey != "" {
			add("kms:Decrypt", kmsKey, nil)
		}
	case "PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "CopyObject":
		add("s3:PutObject", obj, nil)
		if kmsKey != "" {
			add("kms:GenerateDataKey", kmsKey, nil)
		}
	case "DeleteObject":
		add("s3:DeleteObject", obj, nil)
	case "AbortMultipartUpload":
		add("s3:AbortMultipartUpload", obj, nil)
	case "ListObjectsV2", "ListObjects":
		keys := map[string]string{}
		if c.HasPrefix {
			keys["s3:prefix"] = c.Prefix
		}
		add("s3:ListBucket", bucket, keys)
	case "HeadBucket":
		add("s3:ListBucket", bucket, nil) // no s3:prefix key in the request
	default:
		add("s3:"+c.Op, bucket, nil) // unknown: denied unless granted outright
	}
	return out
}

// TestStorePermissions runs the object-store acceptance suite against
// MinIO through the S3 adapter with a recording middleware, the store
// opened exactly as a node opens the module's URL (bucket, prefix = the
// cluster name, SSE as the module sets it), and evaluates every call it
// made against the nodes' policy parsed from iam.tf, the prefix being the
// cluster name. A call the policy would deny fails the test: with the
// store's former start-up HeadBucket it did (s3:ListBucket without an
// s3:prefix key).
func TestStorePermissions(t *testing.T) {
	env := objstoretest.LookupS3Env(t)
	name := "perm" + objstoretest.RandomHex(4) // the module's var.name: the key prefix
	for _, c := range []struct {
		desc   string
		vars   map[string]cty.Value
		kmsKey string
	}{
		{"sse-s3", nil, ""},
		{"sse-kms", map[string]cty.Value{"kms_key_arn": cty.StringVal(testKMSKey)}, testKMSKey},
	} {
		t.Run(c.desc, func(t *testing.T) {
			vars := map[string]cty.Value{"name": cty.StringVal(name)}
			for k, v := range c.vars {
				vars[k] = v
			}
			e := awsEvaluator(t, vars, env.Bucket, 0)
			policy, err := e.Policy("nodes")
			if err != nil {
				t.Fatal(err)
			}
			log := &callLog{}
			sub := 0
			objstoretest.Run(t, func(t *testing.T) objstore.Store {
				// One prefix per subtest, under the cluster's, so the
				// suite's subtests do not see each other's objects.
				sub++
				o := s3store.Options{Bucket: env.Bucket, Prefix: name + "/sub" + objstoretest.RandomHex(3), Endpoint: env.Endpoint,
					Region: "us-east-1", AccessKey: env.AccessKey, SecretKey: env.SecretKey, APIOptions: []func(*middleware.Stack) error{log.option}}
				s, err := s3store.New(t.Context(), o)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() {
					for a, err := range s.List(context.Background(), "") {
						if err == nil {
							_ = s.Delete(context.Background(), a.Key)
						}
					}
					_ = s.Close()
				})
				return s
			})
			ops := map[string]int{}
			denied := 0
			for _, call := range log.calls {
				ops[call.Op]++
				if call.Bucket != env.Bucket {
					t.Errorf("%s on bucket %q, not the store's", call.Op, call.Bucket)
				}
				for _, r := range iamRequests(call, c.kmsKey) {
					if _, ok := Allowed(policy, r); !ok {
						denied++
						if denied <= 10 {
							t.Errorf("denied by the nodes' policy: %v (key %q, prefix %q)", r, call.Key, call.Prefix)
						}
					}
				}
			}
			t.Logf("%d calls of %d subtests: %v; %d denied", len(log.calls), sub, ops, denied)
			for _, op := range []string{"PutObject", "GetObject", "ListObjectsV2", "DeleteObject"} {
				if ops[op] == 0 {
					t.Errorf("the suite made no %s call: the recorder sees nothing", op)
				}
			}
			if strings.Contains(strings.Join(keysOf(ops), ","), "not modelled") {
				t.Errorf("calls whose parameters the test does not model: %v", ops)
			}
		})
	}
}

func keysOf(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
