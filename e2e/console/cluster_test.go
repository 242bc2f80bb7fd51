package console

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/PicoMQ/picomq/internal/testproc"
	"github.com/chromedp/chromedp"
)

// TestConsoleCluster3Nodes: on a three-node cluster (real etcd, real
// MinIO) the cluster page lists the three nodes; after the owner of a
// stream is killed with SIGKILL, the page drops it and the stream shows
// a live owner (the stream page's read is what makes a node claim it).
func TestConsoleCluster3Nodes(t *testing.T) {
	etcdURL := startEtcd(t)
	store, env := startMinio(t)
	var nodes []*node
	for _, id := range []string{"node-a", "node-b", "node-c"} {
		nodes = append(nodes, serve(t, id, env, "--etcd-endpoints", etcdURL, "--object-store", store,
			"--lease-ttl", "3s", "--seal-max-age", "200ms"))
	}
	console := nodes[0]
	// Create the stream on node-b: the node that creates a stream owns it.
	// Durability object: the record acknowledged before the kill is in
	// MinIO, so the new owner must show it.
	h := mustStatusH(t, 201, "PUT", nodes[1].url+"/cluster/moving", map[string]string{"Content-Type": "text/plain", "Pico-Durability": "object"})
	owner := h.Get("Pico-Owner")
	if owner == console.id || owner == "" {
		t.Fatalf("created on node-b, owner %q", owner)
	}
	mustStatus(t, 200, "POST", nodes[1].url+"/cluster/moving", "", "text/plain", "before the kill")

	ctx := browser(t)
	do(t, ctx, 60*time.Second, "open the cluster page",
		chromedp.Navigate(console.url+"/_console/cluster"),
		waitJS(`document.querySelectorAll('#nodes tr[data-node]').length === 3 &&
			document.querySelector('tr[data-node="`+owner+`"] td[data-owned="1"]')`, 30*time.Second))
	for _, n := range nodes {
		if !eval[bool](t, ctx, `!!document.querySelector('tr[data-node="`+n.id+`"]')`) {
			t.Errorf("cluster page lacks %s", n.id)
		}
	}
	if got := eval[string](t, ctx, `document.getElementById('answered').innerText`); !strings.Contains(got, console.id) {
		t.Errorf("answered by %q, want %s", got, console.id)
	}
	screenshot(t, ctx, "cluster")

	var killed *node
	for _, n := range nodes {
		if n.id == owner {
			killed = n
		}
	}
	killed.proc.Kill() // SIGKILL: no drain, no hand-off
	killedAt := time.Now()

	// Until the owner's lease expires the stream stays its; then the
	// next request for it triggers a claim by the node its name hashes to
	// (503 meanwhile). An appending client, following 307s as every
	// client does, or the stream page (reading through /_sys/follow)
	// makes that request; the console must then show the new owner.
	// Reload the pages until the cluster page agrees.
	deadline := time.Now().Add(90 * time.Second)
	var newOwner string
	appended := false
	for {
		if !appended {
			appended = appendVia(console.url+"/cluster/moving", "after the kill")
		}
		do(t, ctx, 30*time.Second, "open the stream page",
			chromedp.Navigate(console.url+"/_console/streams/cluster/moving"),
			waitJS(`document.querySelector('#describe') || document.querySelector('[data-error]')`, 20*time.Second))
		do(t, ctx, 30*time.Second, "open the cluster page",
			chromedp.Navigate(console.url+"/_console/cluster"),
			waitJS(`document.querySelector('#nodes') || document.querySelector('[data-error]')`, 20*time.Second))
		newOwner = eval[string](t, ctx, `(() => {
			const rows = [...document.querySelectorAll('#nodes tr[data-node]')];
			if (rows.length !== 2 || rows.some(r => r.dataset.node === "`+owner+`")) return "";
			const o = rows.find(r => r.querySelector('td[data-owned="1"]'));
			return o ? o.dataset.node : "";
		})()`)
		if newOwner != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster page did not move /cluster/moving off %s within 90 s of the kill:\n%s", owner, pageText(ctx))
		}
		time.Sleep(250 * time.Millisecond) // pacing of the reloads, not a synchronisation
	}
	t.Logf("stream moved from %s to %s, shown %v after the kill", owner, newOwner, time.Since(killedAt).Round(time.Millisecond))
	screenshot(t, ctx, "cluster-after-kill")
	// The stream page may have made the claim before an append got
	// through: append until one is acknowledged.
	for !appended {
		if time.Now().After(deadline) {
			t.Fatal("no append was acknowledged after the kill")
		}
		if appended = appendVia(console.url+"/cluster/moving", "after the kill"); !appended {
			time.Sleep(100 * time.Millisecond) // pacing of the retries, not a synchronisation
		}
	}
	var moved *node
	for _, n := range nodes {
		if n.id == newOwner {
			moved = n
		}
	}
	// The new owner's console reads the stream, and so does the first
	// node's (through /_sys/follow when it does not serve it): the record
	// acknowledged before the kill is there, and the one after it.
	for _, on := range []*node{moved, console} {
		do(t, ctx, 30*time.Second, "read the moved stream on "+on.id,
			chromedp.Navigate(on.url+"/_console/streams/cluster/moving"),
			waitJS(`(document.querySelector('tr[data-offset="0"]')||{innerText:""}).innerText.includes("before the kill") &&
				[...document.querySelectorAll('tr[data-offset]')].some(r => r.innerText.includes("after the kill"))`, 20*time.Second))
	}
}

func mustStatusH(t *testing.T, want int, method, url string, hdr map[string]string) http.Header {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d, want %d", method, url, resp.StatusCode, want)
	}
	return resp.Header
}

// appendVia posts one text record to url, following redirects, and
// reports whether it was acknowledged.
func appendVia(url, value string) bool { return post(url, "text/plain", value) }

// appendJSON posts one JSON record; for load, its outcome does not matter.
func appendJSON(url, value string) { post(url, "application/json", value) }

func post(url, contentType, value string) bool {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post(url, contentType, strings.NewReader(value))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// startEtcd runs a one-member etcd: $PICOMQ_ETCD_BIN, else the one the
// e2e tests build.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := testproc.EtcdBinary(binDir)
	if err != nil {
		t.Fatalf("etcd: %v", err)
	}
	client, _ := testproc.FreeAddr()
	peer, _ := testproc.FreeAddr()
	e := &testproc.Etcd{Bin: bin, Name: "console", DataDir: filepath.Join(t.TempDir(), "etcd"),
		ClientAddr: client, PeerAddr: peer, DieWithParent: true}
	if err := e.Start(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Kill)
	return e.ClientURL()
}

// startMinio runs MinIO from $PICOMQ_MINIO_BIN with a fresh bucket and
// returns the nodes' --object-store URL and environment.
func startMinio(t *testing.T) (string, []string) {
	t.Helper()
	bin := os.Getenv("PICOMQ_MINIO_BIN")
	if bin == "" {
		need(t, "MinIO (PICOMQ_MINIO_BIN)")
	}
	const access, secret, bucket = "picomq-console", "picomq-console-secret", "picomq-console"
	addr, _ := testproc.FreeAddr()
	consoleAddr, _ := testproc.FreeAddr()
	cmd := exec.Command(bin, "server", "--address", addr, "--console-address", consoleAddr, t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER="+access, "MINIO_ROOT_PASSWORD="+secret, "MINIO_BROWSER=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := testproc.Start(cmd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	url := "http://" + addr
	if err := testproc.WaitReady(url+"/minio/health/live", p.Exited, 60*time.Second); err != nil {
		t.Fatalf("minio: %v\n%s", err, p.Logs.String())
	}
	err = testproc.WaitFor(func() error {
		out, err := exec.Command("curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", access+":"+secret,
			"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT", url+"/"+bucket).CombinedOutput()
		if err != nil {
			return fmt.Errorf("make bucket: %v %s", err, out)
		}
		return nil
	}, p.Exited, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("s3://%s?endpoint=%s&region=us-east-1", bucket, url),
		[]string{"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret, "AWS_REGION=us-east-1"}
}
