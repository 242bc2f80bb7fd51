package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
)

// minioServer is a MinIO process owned by one test, so the test can stop
// and restart it (fault tests) without disturbing anything else.
type minioServer struct {
	t       testing.TB
	bin     string
	dir     string
	addr    string
	proc    *testproc.Proc
	logs    *syncBuffer
	Access  string
	Secret  string
	Bucket  string
	started bool
}

// minioBinary finds the MinIO server binary. A missing binary fails the
// test, never skips it: tiering is only proven against a real S3 server.
func minioBinary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("PICOMQ_MINIO_BIN")
	if bin == "" {
		if p, err := exec.LookPath("minio"); err == nil {
			bin = p
		}
	}
	if bin == "" {
		t.Fatal("MinIO not found: set PICOMQ_MINIO_BIN or put minio on PATH (`make test` and .ci/run install it)")
	}
	return bin
}

func startMinio(t testing.TB) *minioServer {
	t.Helper()
	m := newMinio(t)
	m.up()
	return m
}

// newMinio chooses the address, credentials and bucket of a MinIO that up
// starts later (tests of a node booting before its object store).
func newMinio(t testing.TB) *minioServer {
	t.Helper()
	m := &minioServer{t: t, bin: minioBinary(t), dir: t.TempDir(), addr: freeAddr(t),
		Access: "picomq-e2e", Secret: "picomq-e2e-secret", Bucket: "picomq-e2e", logs: &syncBuffer{}}
	t.Cleanup(m.stop)
	return m
}

// up starts MinIO and creates the bucket.
func (m *minioServer) up() {
	t := m.t
	t.Helper()
	m.start()
	// Create the bucket with a signed request. "Live" is not "ready": a
	// MinIO that has just started may still answer 503 while it
	// initialises, so retry for a while.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", m.Access+":"+m.Secret,
			"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT", m.URL()+"/"+m.Bucket).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create bucket: %v %s\n%s", err, out, m.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (m *minioServer) URL() string { return "http://" + m.addr }

// ObjectStoreURL is the --object-store value for picomq.
func (m *minioServer) ObjectStoreURL() string { return m.objectStoreURLVia(m.URL()) }

// objectStoreURLVia is ObjectStoreURL with another endpoint (a proxy).
func (m *minioServer) objectStoreURLVia(endpoint string) string {
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", m.Bucket, endpoint)
}

// Env is what picomq needs to authenticate (the standard AWS variables).
func (m *minioServer) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + m.Access, "AWS_SECRET_ACCESS_KEY=" + m.Secret, "AWS_REGION=us-east-1"}
}

func (m *minioServer) start() {
	m.t.Helper()
	cmd := exec.Command(m.bin, "server", "--address", m.addr, "--console-address", freeAddr(m.t), m.dir)
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+m.Access, "MINIO_ROOT_PASSWORD="+m.Secret, "MINIO_BROWSER=off")
	var err error
	if m.proc, err = testproc.Start(cmd, m.logs); err != nil {
		m.t.Fatalf("start minio: %v", err)
	}
	if err := testproc.WaitReady(m.URL()+"/minio/health/live", m.proc.Exited, 60*time.Second); err != nil {
		m.t.Fatalf("minio: %v\n%s", err, m.logs.String())
	}
	m.started = true
}

// stop kills MinIO (SIGKILL: an outage, not a maintenance window).
func (m *minioServer) stop() {
	if !m.started {
		return
	}
	m.proc.Kill()
	m.started = false
}

// curlPut uploads data as the object at url (tests that damage or
// restore objects behind PicoMQ's back).
func curlPut(m *minioServer, url string, data []byte) ([]byte, error) {
	cmd := exec.Command("curl", "-sf", "-X", "PUT", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", m.Access+":"+m.Secret,
		"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "--data-binary", "@-", url)
	cmd.Stdin = bytes.NewReader(data)
	return cmd.CombinedOutput()
}

// runCurl sends a signed GET to MinIO.
func runCurl(m *minioServer, url string) ([]byte, error) {
	return exec.Command("curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", m.Access+":"+m.Secret,
		"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", url).CombinedOutput()
}
