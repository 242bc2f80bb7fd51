package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// testLayout is the OCI layout under test: $PICOMQ_IMAGE_LAYOUT (what
// `make image` wrote; `make test` sets it), else one built here from
// picomq compiled for both platforms, with the version this test checks.
func testLayout(t *testing.T) (dir, version string) {
	t.Helper()
	if d := os.Getenv("PICOMQ_IMAGE_LAYOUT"); d != "" {
		return d, os.Getenv("PICOMQ_IMAGE_VERSION")
	}
	tmp := t.TempDir()
	version = "v0.0.0-imagetest"
	opt := Options{Version: version, Revision: "0123abc", Created: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC),
		CABundle: "/etc/ssl/certs/ca-certificates.crt"}
	for _, arch := range []string{"amd64", "arm64"} {
		out := filepath.Join(tmp, "picomq-"+arch)
		cmd := exec.Command("go", "build", "-C", "../../..", "-trimpath", "-o", out,
			"-ldflags", "-s -w -X main.version="+version+" -X main.commit=0123abc", "./cmd/picomq")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build picomq %s: %v\n%s", arch, err, b)
		}
		opt.Binaries = append(opt.Binaries, Binary{OS: "linux", Arch: arch, Path: out})
	}
	dir = filepath.Join(tmp, "image")
	if _, err := Build(opt, dir); err != nil {
		t.Fatal(err)
	}
	return dir, version
}

// TestImage unpacks every platform's image from the layout and checks what
// a container runtime would run: a non-root user that exists in the image's
// /etc/passwd, a static binary of the right architecture, CA certificates,
// the OCI labels; then it runs the amd64 binary from the unpacked layers —
// as the image's user inside the unpacked root when the test runs as root
// (chroot, setuid), as a plain child process otherwise — for `picomq
// version` and for a node that serves an append and a read.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("runs linux binaries")
	}
	dir, version := testLayout(t)
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 {
		t.Fatalf("layout index.json lists %d entries, want the one image index", len(rm.Manifests))
	}
	if version != "" && rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Errorf("ref name %q, want %q", rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"], version)
	}
	idx, err := root.ImageIndex(rm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	plats := map[string]v1.Hash{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s without platform", d.Digest)
		}
		plats[d.Platform.OS+"/"+d.Platform.Architecture] = d.Digest
	}
	if len(plats) != 2 || plats["linux/amd64"] == (v1.Hash{}) || plats["linux/arm64"] == (v1.Hash{}) {
		t.Fatalf("platforms %v, want linux/amd64 and linux/arm64", plats)
	}
	machine := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}
	var amd64Root string
	var amd64Cfg *v1.ConfigFile
	for plat, digest := range plats {
		img, err := idx.Image(digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != plat {
			t.Errorf("%s: config says %s/%s", plat, cf.OS, cf.Architecture)
		}
		for _, k := range []string{"version", "revision", "created", "source"} {
			if cf.Config.Labels["org.opencontainers.image."+k] == "" {
				t.Errorf("%s: label org.opencontainers.image.%s missing", plat, k)
			}
		}
		if version != "" && cf.Config.Labels["org.opencontainers.image.version"] != version {
			t.Errorf("%s: version label %q, want %q", plat, cf.Config.Labels["org.opencontainers.image.version"], version)
		}
		uid, gid := checkUser(t, plat, cf.Config.User)
		rootfs := t.TempDir()
		unpack(t, img, rootfs)
		checkPasswd(t, plat, rootfs, uid, gid)
		checkCA(t, plat, rootfs)
		checkBinary(t, plat, filepath.Join(rootfs, BinaryPath), machine[plat])
		if fi, err := os.Stat(filepath.Join(rootfs, DataDir)); err != nil || !fi.IsDir() {
			t.Errorf("%s: data dir %s: %v", plat, DataDir, err)
		} else if os.Geteuid() == 0 && fi.Sys().(*syscall.Stat_t).Uid != uint32(uid) {
			t.Errorf("%s: %s owned by uid %d, want %d", plat, DataDir, fi.Sys().(*syscall.Stat_t).Uid, uid)
		}
		if plat == "linux/amd64" {
			amd64Root, amd64Cfg = rootfs, cf
		}
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the amd64 binary runs on amd64 hosts only")
	}
	runFromLayers(t, amd64Root, amd64Cfg, version)
}

// checkUser parses the config's "uid:gid" and fails on root or a name.
func checkUser(t *testing.T, plat, user string) (uid, gid int) {
	t.Helper()
	if _, err := fmt.Sscanf(user, "%d:%d", &uid, &gid); err != nil {
		t.Fatalf("%s: config user %q is not numeric uid:gid (Kubernetes runAsNonRoot needs a number)", plat, user)
	}
	if uid == 0 || gid == 0 {
		t.Fatalf("%s: image runs as root (%q)", plat, user)
	}
	return uid, gid
}

// unpack applies the image's layers in order into dir (whiteouts honoured
// by mutate.Extract), keeping modes and, as root, owners.
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Clean(h.Name)
		if strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			t.Fatalf("layer entry %q escapes the root", h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		default:
			t.Fatalf("unexpected layer entry %q type %c", h.Name, h.Typeflag)
		}
		if err := os.Chmod(target, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

func checkPasswd(t *testing.T, plat, rootfs string, uid, gid int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	if err != nil {
		t.Fatalf("%s: %v", plat, err)
	}
	want := fmt.Sprintf(":%d:%d:", uid, gid)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, want) {
			return
		}
	}
	t.Errorf("%s: /etc/passwd has no entry for %d:%d:\n%s", plat, uid, gid, b)
}

func checkCA(t *testing.T, plat, rootfs string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(rootfs, CAPath))
	if err != nil {
		t.Fatalf("%s: CA bundle: %v", plat, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		t.Errorf("%s: %s holds no certificate", plat, CAPath)
	}
}

// checkBinary: an ELF executable for the platform, statically linked (no
// program interpreter: the image has no libc).
func checkBinary(t *testing.T, plat, path string, want elf.Machine) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", plat, err)
	}
	defer f.Close()
	if f.Machine != want {
		t.Errorf("%s: binary is for %v, want %v", plat, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: binary is dynamically linked (has PT_INTERP); the image has no libc", plat)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("%s: binary not executable: %v", plat, err)
	}
}

// command runs the image's entrypoint from the unpacked root: as root, in
// a chroot to it with the image user's uid/gid, its env and working dir,
// as a container runtime would; otherwise the binary as this user.
func command(t *testing.T, rootfs string, cf *v1.ConfigFile, args ...string) *exec.Cmd {
	t.Helper()
	uid, gid := checkUser(t, "linux/amd64", cf.Config.User)
	if os.Geteuid() == 0 {
		cmd := exec.Command(cf.Config.Entrypoint[0], args...)
		cmd.Path = cf.Config.Entrypoint[0] // resolved inside the chroot
		cmd.Env = cf.Config.Env
		cmd.Dir = cf.Config.WorkingDir
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		return cmd
	}
	t.Logf("not root: running %s as uid %d outside a chroot", cf.Config.Entrypoint[0], os.Geteuid())
	cmd := exec.Command(filepath.Join(rootfs, cf.Config.Entrypoint[0]), args...)
	cmd.Env = []string{"PICOMQ_DATA_DIR=" + t.TempDir()}
	return cmd
}

func runFromLayers(t *testing.T, rootfs string, cf *v1.ConfigFile, version string) {
	if len(cf.Config.Entrypoint) != 1 || len(cf.Config.Cmd) != 1 || cf.Config.Cmd[0] != "serve" {
		t.Fatalf("entrypoint %q cmd %q, want [picomq] [serve]", cf.Config.Entrypoint, cf.Config.Cmd)
	}
	out, err := command(t, rootfs, cf, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("picomq version from the image: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "picomq ") || (version != "" && !strings.Contains(string(out), version)) {
		t.Fatalf("picomq version printed %q, want version %q", out, version)
	}

	addr := freeAddr(t)
	cmd := command(t, rootfs, cf, append(cf.Config.Cmd, "--http-addr", addr, "--kafka-addr", "off", "--node-id", "image-test")...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("node from the image exited before ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("node from the image not ready in 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send(t, ctx, "PUT", base+"/image/s", "", 201)
	send(t, ctx, "POST", base+"/image/s", `{"from":"the image"}`, 200)
	body := send(t, ctx, "GET", base+"/image/s?offset=0", "", 200)
	if !strings.Contains(body, `"from":"the image"`) {
		t.Fatalf("read back %q, want the appended record", body)
	}
}

func send(t *testing.T, ctx context.Context, method, url, body string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
