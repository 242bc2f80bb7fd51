package console

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleClusterViews: on a three-node cluster (real etcd, real
// MinIO) the console of node-a shows what the other nodes hold:
//   - the Cluster page fills every node's row with that node's own
//     figures, the numbers its /metrics gives;
//   - the page of a stream node-b serves, opened on node-a, shows its
//     records and follows it live (a record appended on node-b appears
//     within 2 s);
//   - the Kafka page lists the consumer groups of every coordinator, with
//     the lag of every partition;
//   - with node-c stopped (SIGSTOP: it accepts connections and answers
//     nothing), the Cluster page still loads in a few seconds and shows
//     node-c's last figures with their age and why they are not fresh.
func TestConsoleClusterViews(t *testing.T) {
	etcdURL := startEtcd(t)
	store, env := startMinio(t)
	var nodes []*node
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		// A long seal age: what a node appends with local durability
		// stays unflushed, so every node has figures other than 0.
		// A long lease: a node stopped for a few seconds (step 4)
		// stays a member.
		nodes = append(nodes, serve(t, id, env, "--etcd-endpoints", etcdURL, "--object-store", store, "--seal-max-age", "1h",
			"--lease-ttl", "30s"))
	}
	a, b := nodes[0], nodes[1]

	// Consumer groups first: their commits have object durability and
	// flush what their coordinator holds.
	const topic = "views-topic"
	createTopic(t, a.kafka, topic)
	coordinators := map[string]string{} // group -> node
	groups := 0
	for groups < 3 || distinct(coordinators) < 2 {
		if groups == 10 {
			t.Fatalf("10 groups, all coordinated by one node: %v", coordinators)
		}
		g := fmt.Sprintf("views-g%d", groups)
		cl := groupMember(t, a.kafka, topic, g, 3, 1)
		t.Cleanup(cl.Close)
		groups++
		coordinators = localCoordinators(t, nodes)
	}
	t.Logf("groups and their coordinators: %v", coordinators)

	// On every node a stream flushed to MinIO (object durability), then
	// one with a record only in the node's WAL.
	for _, n := range nodes {
		h := mustStatusH(t, 201, "PUT", n.url+"/views/obj-"+n.id, map[string]string{"Content-Type": "text/plain", "Pico-Durability": "object"})
		if h.Get("Pico-Owner") != n.id {
			t.Fatalf("/views/obj-%s created on %s is owned by %q", n.id, n.id, h.Get("Pico-Owner"))
		}
		mustStatus(t, 200, "POST", n.url+"/views/obj-"+n.id, "", "text/plain", "in object storage on "+n.id)
		mustStatus(t, 201, "PUT", n.url+"/views/local-"+n.id, "", "text/plain", "")
		mustStatus(t, 200, "POST", n.url+"/views/local-"+n.id, "", "text/plain", "in the WAL of "+n.id)
	}

	ctx := browser(t)

	// 1. Every node's row has its own figures, equal to its /metrics.
	figs := []string{"streamsOwned", "unflushedBytes", "walDiskBytes", "objectBytes", "flushLagMs"}
	metricOf := map[string]string{"streamsOwned": "picomq_streams", "unflushedBytes": "picomq_unflushed_bytes",
		"walDiskBytes": "picomq_wal_disk_bytes", "objectBytes": "picomq_object_bytes", "flushLagMs": "picomq_flush_lag_seconds"}
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 1; ; attempt++ {
		do(t, ctx, 30*time.Second, "open the cluster page",
			chromedp.Navigate(a.url+"/_console/cluster"),
			waitJS(`document.querySelectorAll('#nodes tr[data-node]').length === 3`, 20*time.Second))
		var mismatch []string
		for _, n := range nodes {
			shown := eval[map[string]string](t, ctx, `(() => {
				const out = {};
				for (const td of document.querySelectorAll('tr[data-node="`+n.id+`"] td[data-fig]')) {
					out[td.dataset.fig] = td.dataset.value === undefined ? "" : td.dataset.value;
					out[td.dataset.fig + ".text"] = td.innerText;
				}
				return out;
			})()`)
			m := scrape(t, n.url)
			for _, f := range figs {
				v, err := strconv.ParseFloat(shown[f], 64)
				if err != nil || shown[f+".text"] == "—" {
					mismatch = append(mismatch, fmt.Sprintf("%s %s: shown %q (%q)", n.id, f, shown[f], shown[f+".text"]))
					continue
				}
				want := m[metricOf[f]]
				if f == "flushLagMs" {
					// The lag grows between the page and the scrape.
					if want*1000 < v || want*1000-v > 30000 {
						mismatch = append(mismatch, fmt.Sprintf("%s flush lag: shown %v ms, /metrics %v s", n.id, v, want))
					}
				} else if v != want {
					mismatch = append(mismatch, fmt.Sprintf("%s %s: shown %v, /metrics %s %v", n.id, f, v, metricOf[f], want))
				}
				if v <= 0 {
					mismatch = append(mismatch, fmt.Sprintf("%s %s: %v, want > 0", n.id, f, v))
				}
			}
		}
		if len(mismatch) == 0 {
			t.Logf("cluster page: every node's figures equal its /metrics (attempt %d)", attempt)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster page's figures do not match the nodes' /metrics:\n%s\npage:\n%s", strings.Join(mismatch, "\n"), pageText(ctx))
		}
		time.Sleep(500 * time.Millisecond) // pacing of the reloads, not a synchronisation
	}
	screenshot(t, ctx, "cluster-figures")

	// 2. A stream node-b serves, opened on node-a: its record, then a
	// record appended on node-b after the page opened, live.
	stream := "/views/local-" + b.id
	do(t, ctx, 30*time.Second, "open node-b's stream on node-a",
		chromedp.Navigate(a.url+"/_console/streams"+stream),
		waitJS(`(document.querySelector('tr[data-offset="0"]')||{innerText:""}).innerText.includes("in the WAL of `+b.id+`") &&
			document.getElementById('live').dataset.state === 'following'`, 20*time.Second))
	if got := eval[string](t, ctx, `document.getElementById('live').innerText`); !strings.Contains(got, "read from "+b.id+" through "+a.id) {
		t.Errorf("live tail line %q does not say it reads from %s through %s", got, b.id, a.id)
	}
	mustStatus(t, 200, "POST", b.url+stream, "", "text/plain", "appended on node-b later")
	acked := time.Now()
	do(t, ctx, 10*time.Second, "the live tail shows the new record",
		waitJS(`(document.querySelector('tr[data-offset="1"]')||{innerText:""}).innerText.includes("appended on node-b later")`, 5*time.Second))
	if took := time.Since(acked); took > 2*time.Second {
		t.Errorf("the record appended on node-b showed on node-a's page %v after its ack, want within 2 s", took)
	} else {
		t.Logf("the record appended on node-b showed on node-a's page %v after its ack", took.Round(time.Millisecond))
	}
	screenshot(t, ctx, "stream-followed")

	// 3. Groups of every coordinator, with their lag: each group
	// committed offset 1 of a partition now holding 3 records per group.
	lag := 3*groups - 1
	expr := []string{fmt.Sprintf(`document.querySelectorAll('[data-group^="views-g"]').length === %d`, groups)}
	for g, coord := range coordinators {
		expr = append(expr, fmt.Sprintf(`document.querySelector('[data-group="%s"] [data-coordinator="%s"]')`, g, coord),
			fmt.Sprintf(`document.querySelector('[data-group="%s"] tr[data-partition="%s/0"] td[data-lag="%d"]')`, g, topic, lag))
	}
	do(t, ctx, 40*time.Second, "open the Kafka page",
		chromedp.Navigate(a.url+"/_console/kafka"),
		waitJS(strings.Join(expr, " && "), 30*time.Second))
	screenshot(t, ctx, "kafka-cluster")

	// 4. A node that does not answer: its row keeps the last figures,
	// marked with their age, and the page does not wait for it.
	c := nodes[2]
	if err := c.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.proc.Cmd.Process.Signal(syscall.SIGCONT) })
	start := time.Now()
	do(t, ctx, 30*time.Second, "open the cluster page with node-c stopped",
		chromedp.Navigate(a.url+"/_console/cluster"),
		waitJS(`document.querySelector('#nodes') || document.querySelector('[data-error]')`, 20*time.Second))
	took := time.Since(start)
	row := eval[map[string]string](t, ctx, `(() => {
		const r = document.querySelector('tr[data-node="`+c.id+`"]');
		if (!r) return {};
		const e = r.querySelector('[data-figures-error]');
		return { stale: r.dataset.stale || "", age: r.dataset.figuresAge || "", note: e ? e.innerText : "",
			unflushed: (r.querySelector('td[data-fig="unflushedBytes"]') || {}).dataset?.value || "" };
	})()`)
	ageMs, _ := strconv.Atoi(row["age"])
	if row["stale"] != "1" || ageMs <= 0 || !strings.Contains(row["note"], "no answer within 2s") || row["unflushed"] == "" {
		t.Errorf("node-c stopped: its row %v, want stale figures with an age and the reason\npage:\n%s", row, pageText(ctx))
	}
	if took > 8*time.Second {
		t.Errorf("the cluster page took %v with node-c stopped; each node is asked within 2 s", took)
	}
	t.Logf("with node-c stopped the cluster page loaded in %v: %q", took.Round(time.Millisecond), row["note"])
	screenshot(t, ctx, "cluster-node-stopped")
	if err := c.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// localCoordinators asks every node which groups it coordinates
// (GET /_sys/groups?local=true): the truth the console must show.
func localCoordinators(t *testing.T, nodes []*node) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range nodes {
		_, _, body := request(t, "GET", n.url+"/_sys/groups?local=true", "", "", "")
		var ans struct {
			Groups []struct {
				Group string `json:"group"`
			} `json:"groups"`
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("%s /_sys/groups?local=true: %v: %s", n.id, err, body)
		}
		for _, g := range ans.Groups {
			out[g.Group] = n.id
		}
	}
	return out
}

func distinct(m map[string]string) int {
	seen := map[string]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}

// scrape reads a node's /metrics: the sum of each metric's samples.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			_, rest, ok = strings.Cut(line, "} ")
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil && !math.IsNaN(v) {
			out[name] += v
		}
	}
	return out
}
