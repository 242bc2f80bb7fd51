package tftests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// etcdTool returns the path deploy/etcd-tools.sh prints for what
// ("bin" = etcdutl, "etcdctl"); missing fails when required() (CI, make
// tf-test), else skips.
func etcdTool(t *testing.T, what string) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repo, "deploy/etcd-tools.sh"), what).Output()
	p := strings.TrimSpace(string(out))
	if err == nil {
		if _, serr := os.Stat(p); serr == nil {
			return p
		}
	}
	if required() {
		t.Fatalf("%s missing: deploy/etcd-tools.sh build (.ci/run and make tf-test run it)", what)
	}
	t.Skipf("%s not built: run deploy/etcd-tools.sh build", what)
	return ""
}

// TestEtcdBackupScript runs deploy/etcd-backup.sh (etcd-backup.service on
// every etcd member) against a real etcd with client-certificate TLS, as
// on AWS: it takes a snapshot with etcdctl through the member's client
// port with the member certificate, checks it with etcdutl, and uploads it
// with `aws s3 cp` (a fake CLI that copies into a directory) to
// <uri>/<UTC time>.db. The uploaded snapshot is valid and holds the data;
// a failed upload fails the run; nothing is left in the work directory.
func TestEtcdBackupScript(t *testing.T) {
	etcdutl, etcdctl := etcdTool(t, "bin"), etcdTool(t, "etcdctl")
	dir := t.TempDir()
	etcdBin := os.Getenv("PICOMQ_ETCD_BIN")
	if etcdBin == "" {
		etcdBin = buildRepo(t, filepath.Join(dir, "etcd"), "./e2e/cmd/etcd")
	}
	pki := newPKI(t, filepath.Join(dir, "pki"))
	url := startEtcd(t, etcdBin, filepath.Join(dir, "etcd-data"), pki)

	// The member's TLS directory, as cloud-init writes /etc/etcd/tls.
	tlsDir := filepath.Join(dir, "tls")
	for from, to := range map[string]string{"ca.crt": "ca.crt", "etcd.crt": "member.crt", "etcd.key": "member.key"} {
		writeFile(t, filepath.Join(tlsDir, to), pki.read(from))
	}
	ctl := func(args ...string) {
		t.Helper()
		cmd := exec.Command(etcdctl, append([]string{"--endpoints", url, "--cacert", filepath.Join(tlsDir, "ca.crt"),
			"--cert", filepath.Join(tlsDir, "member.crt"), "--key", filepath.Join(tlsDir, "member.key")}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("etcdctl %v: %v\n%s", args, err, out)
		}
	}
	ctl("put", "/picomq/counters/stream-id", "4242")

	bucket := filepath.Join(dir, "bucket")
	fakeAWS := filepath.Join(dir, "aws")
	writeFile(t, fakeAWS, `#!/bin/bash
# aws s3 cp [--only-show-errors] SRC s3://bucket/key: a copy into $BUCKET_DIR.
set -euo pipefail
[ "$1 $2" = "s3 cp" ] || { echo "fake aws: unsupported: $*" >&2; exit 2; }
shift 2
[ "$1" = --only-show-errors ] && shift
[ -n "${FAIL_UPLOAD:-}" ] && { echo "upload failed: AccessDenied" >&2; exit 1; }
dst="$BUCKET_DIR/${2#s3://}"
mkdir -p "$(dirname "$dst")"
cp "$1" "$dst"
`)
	if err := os.Chmod(fakeAWS, 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		t.Fatal(err)
	}
	backup := func(extra ...string) (string, error) {
		cmd := exec.Command("bash", filepath.Join(repo, "deploy/etcd-backup.sh"), "s3://segments/test-etcd-backups/test-etcd-0", url)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(etcdctl)+":"+os.Getenv("PATH"), "AWS_CLI="+fakeAWS,
			"BUCKET_DIR="+bucket, "ETCD_BACKUP_TLS_DIR="+tlsDir, "ETCD_BACKUP_WORK_DIR="+work)
		cmd.Env = append(cmd.Env, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := backup()
	if err != nil {
		t.Fatalf("etcd-backup.sh: %v\n%s", err, out)
	}
	t.Logf("etcd-backup.sh: %s", strings.TrimSpace(out))
	snaps, _ := filepath.Glob(filepath.Join(bucket, "segments/test-etcd-backups/test-etcd-0/*.db"))
	if len(snaps) != 1 || !regexp.MustCompile(`/\d{8}T\d{6}Z\.db$`).MatchString(snaps[0]) {
		t.Fatalf("uploaded snapshots %v, want one <UTC time>.db under the member's prefix", snaps)
	}
	if st, err := exec.Command(etcdutl, "snapshot", "status", snaps[0], "-w", "json").CombinedOutput(); err != nil {
		t.Fatalf("the uploaded snapshot does not check: %v\n%s", err, st)
	}
	restored := filepath.Join(dir, "restored")
	if rst, err := exec.Command(etcdutl, "snapshot", "restore", snaps[0], "--data-dir", restored).CombinedOutput(); err != nil {
		t.Fatalf("the uploaded snapshot does not restore: %v\n%s", err, rst)
	}
	if left, _ := os.ReadDir(work); len(left) != 0 {
		t.Errorf("etcd-backup.sh left %d entries in its work directory", len(left))
	}

	if out, err := backup("FAIL_UPLOAD=1"); err == nil {
		t.Fatalf("etcd-backup.sh succeeded although the upload failed:\n%s", out)
	}
	if left, _ := os.ReadDir(work); len(left) != 0 {
		t.Errorf("a failed run left %d entries in the work directory", len(left))
	}
}
