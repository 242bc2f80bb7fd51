package e2e

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/PicoMQ/picomq/meta"
)

// violatedStream picks the stream name out of a checker violation.
var violatedStream = regexp.MustCompile(`^(/[^ :]+)`)

// dumpRegistry writes, for every stream a violation names, its registry
// record and every manifest entry of it (node, sequence, level, object,
// offsets, commit time) as etcd holds them at the end of the run: what a
// violation that happened minutes earlier can still be explained from
// (which object held the offsets, who committed it, whether a compaction
// or collection replaced it).
func dumpRegistry(w io.Writer, endpoint string, violations []string) {
	names := map[string]bool{}
	for _, v := range violations {
		if m := violatedStream.FindStringSubmatch(v); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		return
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintf(w, "registry dump: %v\n", err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reg := meta.NewRegistry(cli, "/picomq/")
	ms, err := reg.Manifests(ctx)
	if err != nil {
		fmt.Fprintf(w, "registry dump: manifests: %v\n", err)
		return
	}
	for name := range names {
		s, err := reg.GetStream(ctx, name)
		if err != nil {
			fmt.Fprintf(w, "registry dump: %s: %v\n", name, err)
			continue
		}
		fmt.Fprintf(w, "registry dump: %s id %d owner %s epoch %d start %d durability %s\n", name, s.ID, s.Owner, s.Epoch, s.StartOffset, s.Durability)
		type entry struct {
			first, next int64
			line        string
		}
		var es []entry
		for _, m := range ms {
			for _, e := range m.Streams {
				if e.StreamID != s.ID {
					continue
				}
				es = append(es, entry{e.First, e.Next, fmt.Sprintf("  [%d, %d) %s seq %d level %d object %s (%d bytes at %d) committed %s state %d bytes",
					e.First, e.Next, m.Node, m.Seq, m.Level, m.Object, e.Length, e.Offset, m.CreatedAt.Format("15:04:05.000"), len(e.State))})
			}
		}
		sort.Slice(es, func(i, j int) bool {
			return es[i].first < es[j].first || (es[i].first == es[j].first && es[i].next < es[j].next)
		})
		for i, e := range es {
			if i == 400 {
				fmt.Fprintf(w, "  … and %d more\n", len(es)-400)
				break
			}
			fmt.Fprintln(w, e.line)
		}
	}
}
