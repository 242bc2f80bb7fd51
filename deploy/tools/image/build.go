package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts; docs/operations.md and the Helm chart rely on
// them (uid, paths, ports).
const (
	UID        = 65532 // "nonroot", as distroless images number it
	BinaryPath = "/usr/local/bin/picomq"
	DataDir    = "/var/lib/picomq"
	CAPath     = "/etc/ssl/certs/ca-certificates.crt"
)

// Binary is one platform's static picomq executable.
type Binary struct {
	OS, Arch, Path string
}

// Options say what to build.
type Options struct {
	Binaries []Binary
	Version  string
	Revision string
	Created  time.Time
	CABundle string // PEM file copied to CAPath
}

// Labels are the image config labels (and index annotations) of opt.
func (opt Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "picomq",
		"org.opencontainers.image.description": "PicoMQ: tiered-storage log service (Pico, Durable Streams and Kafka protocols)",
		"org.opencontainers.image.version":     opt.Version,
		"org.opencontainers.image.revision":    opt.Revision,
		"org.opencontainers.image.created":     opt.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      "https://github.com/PicoMQ/picomq",
	}
}

// Build writes the image index of opt as an OCI layout at dir (replacing
// what was there) and returns the index digest. The index is referenced
// in the layout's index.json under the version as its ref name.
func Build(opt Options, dir string) (v1.Hash, error) {
	ca, err := os.ReadFile(opt.CABundle)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("CA bundle: %w (install Debian's ca-certificates, or pass -ca-bundle)", err)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(ca) {
		return v1.Hash{}, fmt.Errorf("CA bundle %s holds no PEM certificate", opt.CABundle)
	}
	base, err := layerOf(rootFS(ca), opt.Created)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("base layer: %w", err)
	}
	sort.Slice(opt.Binaries, func(i, j int) bool { return opt.Binaries[i].Arch < opt.Binaries[j].Arch })
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range opt.Binaries {
		img, err := platformImage(opt, b, base)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s/%s: %w", b.OS, b.Arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: b.OS, Architecture: b.Arch},
		}})
	}
	idx = mutate.Annotations(idx, opt.Labels()).(v1.ImageIndex)
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": opt.Version,
	})); err != nil {
		return v1.Hash{}, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return idx.Digest()
}

func platformImage(opt Options, b Binary, base v1.Layer) (v1.Image, error) {
	bin, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	binLayer, err := layerOf([]entry{
		{name: "usr/", dir: true, mode: 0o755},
		{name: "usr/local/", dir: true, mode: 0o755},
		{name: "usr/local/bin/", dir: true, mode: 0o755},
		{name: BinaryPath[1:], mode: 0o755, data: bin},
	}, opt.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.AppendLayers(img, base, binLayer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = b.OS, b.Arch
	cf.Created = v1.Time{Time: opt.Created}
	cf.Author = "PicoMQ"
	cf.Config.User = fmt.Sprintf("%d:%d", UID, UID)
	cf.Config.Entrypoint = []string{BinaryPath}
	cf.Config.Cmd = []string{"serve"}
	cf.Config.WorkingDir = DataDir
	cf.Config.Env = []string{
		"PATH=/usr/local/bin",
		"SSL_CERT_FILE=" + CAPath,
		"PICOMQ_DATA_DIR=" + DataDir,
	}
	cf.Config.ExposedPorts = map[string]struct{}{"4437/tcp": {}, "9092/tcp": {}}
	cf.Config.Volumes = map[string]struct{}{DataDir: {}}
	cf.Config.Labels = opt.Labels()
	cf.History = []v1.History{
		{Created: cf.Created, CreatedBy: "picomq image: root filesystem (nonroot user, CA certificates, " + DataDir + ")", Comment: "deploy/tools/image"},
		{Created: cf.Created, CreatedBy: "picomq image: " + BinaryPath + " " + opt.Version, Comment: "deploy/tools/image"},
	}
	return mutate.ConfigFile(img, cf)
}

// entry is one file or directory of a layer.
type entry struct {
	name     string
	dir      bool
	mode     int64
	uid, gid int
	data     []byte
}

// rootFS is what a distroless "static" base holds, built here instead of
// pulled: the nonroot user and group, the CA bundle, a sticky /tmp and the
// data directory owned by the nonroot user.
func rootFS(ca []byte) []entry {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, UID)
	group := fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", UID)
	return []entry{
		{name: "etc/", dir: true, mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "etc/ssl/", dir: true, mode: 0o755},
		{name: "etc/ssl/certs/", dir: true, mode: 0o755},
		{name: CAPath[1:], mode: 0o644, data: ca},
		{name: "home/", dir: true, mode: 0o755},
		{name: "home/nonroot/", dir: true, mode: 0o700, uid: UID, gid: UID},
		{name: "root/", dir: true, mode: 0o700},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "var/", dir: true, mode: 0o755},
		{name: "var/lib/", dir: true, mode: 0o755},
		{name: DataDir[1:] + "/", dir: true, mode: 0o750, uid: UID, gid: UID},
	}
}

// layerOf packs entries into a gzip-compressed OCI layer; every file gets
// the same modification time, so equal inputs give equal digests.
func layerOf(entries []entry, mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX}
		if e.uid == UID {
			h.Uname, h.Gname = "nonroot", "nonroot"
		} else {
			h.Uname, h.Gname = "root", "root"
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if path.IsAbs(e.name) {
			return nil, fmt.Errorf("layer path %q is absolute", e.name)
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
