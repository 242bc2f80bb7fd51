package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/PicoMQ/picomq/meta"
	"github.com/PicoMQ/picomq/tiering"
	"github.com/PicoMQ/picomq/tiering/objstore"
	"github.com/PicoMQ/picomq/tiering/objstore/storeurl"
	"github.com/PicoMQ/picomq/tiering/segment"
)

// defaultIDMargin is how far above the highest stream ID found in object
// storage the counter is raised. IDs handed out after the snapshot whose
// data never reached object storage (a stream still only in a WAL, the
// rest of a node's ID block) are invisible to the scan; skipping a million
// of 2^64 IDs costs nothing and keeps them unused too.
const defaultIDMargin = 1 << 20

const restoreUsage = `picomq restore-counters: after restoring etcd from a snapshot, raise the
stream-ID counter above every stream ID present in object storage.

A snapshot holds the counter as it was when it was taken; streams created
later have higher IDs, and their objects are still in the bucket (object
names are streams/<id>/…, and every flush object's footer lists its
streams). A counter left lower would hand those IDs out again, and a new
stream would meet the old one's objects. Run it once against the restored
cluster, before any node starts (docs/operations.md, "Restore etcd").

Usage:
  picomq restore-counters --etcd-endpoints E --object-store URL [flags]

Flags:
`

// restoreCountersCmd scans the object store for the highest stream ID and
// raises the registry's counter to it plus a margin; it never lowers it.
func restoreCountersCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("restore-counters", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, restoreUsage); fs.PrintDefaults() }
	endpoints := fs.String("etcd-endpoints", "", "comma-separated etcd client URLs of the restored cluster")
	etcdCA := fs.String("etcd-ca", "", "CA bundle that signed etcd's server certificates")
	etcdCert := fs.String("etcd-cert", "", "client certificate for etcd (with --etcd-key)")
	etcdKey := fs.String("etcd-key", "", "client key for etcd")
	store := fs.String("object-store", "", "the cluster's object store URL, as in `picomq serve --object-store`")
	prefix := fs.String("etcd-prefix", "/picomq/", "the registry's etcd key prefix")
	margin := fs.Uint64("margin", defaultIDMargin, "how far above the highest ID found the counter is set")
	dryRun := fs.Bool("dry-run", false, "scan and report, change nothing")
	timeout := fs.Duration("timeout", 30*time.Minute, "bound of the whole run (the scan reads one footer per flush object)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *endpoints == "" || *store == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "picomq restore-counters: --etcd-endpoints and --object-store are required")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := storeurl.Open(ctx, *store)
	if err != nil {
		fmt.Fprintf(stderr, "picomq restore-counters: --object-store: %v\n", err)
		return 1
	}
	defer st.Close()
	highest, objects, err := highestStoredStreamID(ctx, st)
	if err != nil {
		fmt.Fprintf(stderr, "picomq restore-counters: scanning the object store: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "highest stream id in object storage: %d (%d objects scanned)\n", highest, objects)
	tc, err := etcdClientTLS(*endpoints, *etcdCA, *etcdCert, *etcdKey)
	if err != nil {
		fmt.Fprintf(stderr, "picomq restore-counters: %v\n", err)
		return 2
	}
	var opts []meta.DialOption
	if tc != nil {
		opts = append(opts, meta.WithTLS(tc))
	}
	cli, err := meta.Dial(ctx, strings.Split(*endpoints, ","), opts...)
	if err != nil {
		fmt.Fprintf(stderr, "picomq restore-counters: %v\n", err)
		return 1
	}
	defer cli.Close()
	key := *prefix + "counters/stream-id"
	floor := highest + *margin
	before, after, err := raiseCounter(ctx, cli, key, floor, *dryRun)
	if err != nil {
		fmt.Fprintf(stderr, "picomq restore-counters: %s: %v\n", key, err)
		return 1
	}
	switch {
	case *dryRun:
		fmt.Fprintf(stdout, "%s is %d; would set it to %d (dry run)\n", key, before, max(before, floor))
	case after == before:
		fmt.Fprintf(stdout, "%s is %d, already above %d: unchanged\n", key, before, floor)
	default:
		fmt.Fprintf(stdout, "%s raised from %d to %d\n", key, before, after)
	}
	return 0
}

// highestStoredStreamID returns the highest stream ID any object names:
// merged segments carry it in their key (streams/<id>/<base>), flush
// objects (l0/<node>/…) in their footer, which is read (two ranged GETs).
func highestStoredStreamID(ctx context.Context, st objstore.Store) (highest uint64, objects int, err error) {
	for a, err := range st.List(ctx, tiering.StreamsPrefix) {
		if err != nil {
			return 0, objects, err
		}
		objects++
		if id, _, ok := tiering.ParseL1Key(a.Key); ok {
			highest = max(highest, id)
		}
	}
	for a, err := range st.List(ctx, tiering.L0Prefix) {
		if err != nil {
			return 0, objects, err
		}
		objects++
		r, err := segment.Open(ctx, st, a.Key, a.Size)
		if errors.Is(err, objstore.ErrNotExist) {
			continue // deleted since the listing (garbage collection)
		}
		if err != nil {
			return 0, objects, fmt.Errorf("footer of %s: %w", a.Key, err)
		}
		for _, e := range r.Streams() {
			highest = max(highest, e.StreamID)
		}
	}
	return highest, objects, nil
}

// raiseCounter sets key to floor when it holds less (absent counts as 0),
// with a compare-and-swap on its revision, so a node that reserved a block
// meanwhile is never overwritten by a lower value.
func raiseCounter(ctx context.Context, cli *clientv3.Client, key string, floor uint64, dryRun bool) (before, after uint64, err error) {
	for {
		resp, err := cli.Get(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		var cur uint64
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			if cur, err = strconv.ParseUint(string(kv.Value), 10, 64); err != nil {
				return 0, 0, fmt.Errorf("not a decimal counter: %q", kv.Value)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
		}
		if cur >= floor || dryRun {
			return cur, cur, nil
		}
		t, err := cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatUint(floor, 10))).Commit()
		if err != nil {
			return cur, cur, err
		}
		if t.Succeeded {
			return cur, floor, nil
		}
	}
}

// etcdClientTLS builds the client TLS of the etcd flags (nil for plain
// http endpoints without certificates).
func etcdClientTLS(endpoints, ca, cert, key string) (*tls.Config, error) {
	if ca == "" && cert == "" && !strings.Contains(endpoints, "https://") {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--etcd-ca %s: no PEM certificate", ca)
		}
	}
	if cert != "" {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert/--etcd-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
