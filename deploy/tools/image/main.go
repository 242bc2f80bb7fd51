// Command image builds PicoMQ's container image without a container
// runtime: a multi-platform OCI image index (linux/amd64, linux/arm64)
// written as an OCI image layout directory. Each image is two layers on
// nothing (no base image is pulled): a root filesystem with the non-root
// user, CA certificates and the data directory, then the static picomq
// binary. `make image` runs it with the binaries `make release` builds
// (docs/operations.md, "Kubernetes").
//
//	go run ./image -out dist/image -version v1.2.3 -revision <commit> \
//	  -binary linux/amd64=dist/picomq-v1.2.3-linux-amd64 \
//	  -binary linux/arm64=dist/picomq-v1.2.3-linux-arm64
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

type binaryFlag map[string]string // "os/arch" -> path

func (b binaryFlag) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaryFlag) Set(v string) error {
	plat, path, ok := strings.Cut(v, "=")
	if !ok || plat == "" || path == "" {
		return fmt.Errorf("want OS/ARCH=PATH, got %q", v)
	}
	if _, dup := b[plat]; dup {
		return fmt.Errorf("%s given twice", plat)
	}
	b[plat] = path
	return nil
}

func main() {
	bins := binaryFlag{}
	var opt Options
	flag.Var(bins, "binary", "OS/ARCH=PATH of a static picomq binary; repeat per platform")
	flag.StringVar(&opt.Version, "version", "dev", "org.opencontainers.image.version (as make release stamps it)")
	flag.StringVar(&opt.Revision, "revision", "unknown", "org.opencontainers.image.revision: the commit")
	created := flag.String("created", "", "org.opencontainers.image.created, RFC 3339 (default: $SOURCE_DATE_EPOCH, else now)")
	flag.StringVar(&opt.CABundle, "ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM CA certificates copied into the image (Debian's ca-certificates)")
	out := flag.String("out", "dist/image", "OCI image layout directory to write (replaced)")
	flag.Parse()
	if len(bins) == 0 {
		fail(fmt.Errorf("no -binary given"))
	}
	t, err := createdTime(*created)
	if err != nil {
		fail(err)
	}
	opt.Created = t
	for plat, path := range bins {
		osName, arch, ok := strings.Cut(plat, "/")
		if !ok {
			fail(fmt.Errorf("-binary %s: want OS/ARCH", plat))
		}
		opt.Binaries = append(opt.Binaries, Binary{OS: osName, Arch: arch, Path: path})
	}
	digest, err := Build(opt, *out)
	if err != nil {
		fail(err)
	}
	fmt.Printf("image: %s (index %s, %d platforms, version %s)\n", *out, digest, len(bins), opt.Version)
}

func createdTime(s string) (time.Time, error) {
	if s != "" {
		return time.Parse(time.RFC3339, s)
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		var sec int64
		if _, err := fmt.Sscan(e, &sec); err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", e, err)
		}
		return time.Unix(sec, 0).UTC(), nil
	}
	return time.Now().UTC().Truncate(time.Second), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "image:", err)
	os.Exit(1)
}
