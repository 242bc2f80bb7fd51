package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestConsoleStreamsList: the streams page lists a stream created over
// HTTP and one created by a Kafka client (CreateTopics), with the
// Kafka alias of each.
func TestConsoleStreamsList(t *testing.T) {
	n := serve(t, "solo", nil) // started first, stopped after the browser
	ctx := browser(t)
	mustStatus(t, 201, "PUT", n.url+"/console/http-made", "", "application/json", "")
	createTopic(t, n.kafka, "kafka-made")

	do(t, ctx, 30*time.Second, "open the streams page",
		chromedp.Navigate(n.url+"/_console/streams"),
		waitJS(`document.querySelector('tr[data-stream="/console/http-made"]') && document.querySelector('tr[data-stream="/kafka-made"]')`, 20*time.Second))
	row := eval[string](t, ctx, `document.querySelector('tr[data-stream="/kafka-made"]').innerText`)
	if !strings.Contains(row, "kafka-made") || !strings.Contains(row, "solo") {
		t.Errorf("Kafka-made stream's row %q lacks its topic or owner", row)
	}
	row = eval[string](t, ctx, `document.querySelector('tr[data-stream="/console/http-made"]').innerText`)
	if !strings.Contains(row, "console.http-made") || !strings.Contains(row, "application/json") {
		t.Errorf("HTTP-made stream's row %q lacks its derived topic or content type", row)
	}
	screenshot(t, ctx, "streams")

	// The prefix filter is a link too.
	do(t, ctx, 30*time.Second, "filter by prefix",
		chromedp.Navigate(n.url+"/_console/streams?prefix=/console/"),
		waitJS(`document.querySelector('tr[data-stream="/console/http-made"]') && !document.querySelector('tr[data-stream="/kafka-made"]')`, 20*time.Second))

	// A consumer group member that committed 2 of the 5 records: the
	// Kafka page shows the member, its assignment and a lag of 3.
	cl := groupMember(t, n.kafka, "kafka-made", "console-group", 5, 2)
	defer cl.Close()
	do(t, ctx, 30*time.Second, "open the Kafka page",
		chromedp.Navigate(n.url+"/_console/kafka"),
		waitJS(`document.querySelector('tr[data-topic="kafka-made"]') &&
			document.querySelector('[data-group="console-group"] tr[data-member]') &&
			document.querySelector('[data-group="console-group"] tr[data-partition="kafka-made/0"] td[data-lag="3"]')`, 20*time.Second))
	if got := eval[string](t, ctx, `document.querySelector('[data-group="console-group"] tr[data-member]').innerText`); !strings.Contains(got, "console-e2e") || !strings.Contains(got, "kafka-made: 0") {
		t.Errorf("member row %q lacks its client id or assignment", got)
	}
	screenshot(t, ctx, "kafka")
}

// groupMember produces n records to topic, joins group with a consumer
// that reads them and commits the first commit ones, and stays a member
// until closed.
func groupMember(t *testing.T, addr, topic, group string, n, commit int) *kgo.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprintf("record %d", i))).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	prod.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ClientID("console-e2e"), kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	var got []*kgo.Record
	for len(got) < commit {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			cl.Close()
			t.Fatalf("consumed %d records: %v", len(got), err)
		}
		got = append(got, fs.Records()...)
	}
	if err := cl.CommitRecords(ctx, got[:commit]...); err != nil {
		cl.Close()
		t.Fatalf("commit: %v", err)
	}
	return cl
}

func createTopic(t *testing.T, addr, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("CreateTopics: %v", err)
	}
	if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: %+v", resp.Topics)
	}
}

// TestConsoleLiveTail: a record appended after the stream page opened
// appears in it within 2 s, through the live tail (SSE read with fetch,
// the token-less node here; the auth test covers the header).
func TestConsoleLiveTail(t *testing.T) {
	n := serve(t, "solo", nil) // started first, stopped after the browser
	ctx := browser(t)
	mustStatus(t, 201, "PUT", n.url+"/console/tail", "", "application/json", "")
	mustStatus(t, 200, "POST", n.url+"/console/tail", "", "application/json", `{"before":"open"}`)

	do(t, ctx, 30*time.Second, "open the stream page",
		chromedp.Navigate(n.url+"/_console/streams/console/tail"),
		waitJS(`document.querySelector('tr[data-offset="0"]') && document.getElementById('live').dataset.state === 'following'`, 20*time.Second))

	marker := fmt.Sprintf("appended-after-open-%d", time.Now().UnixNano())
	h := mustStatus(t, 200, "POST", n.url+"/console/tail", "", "application/json", `{"marker":"`+marker+`"}`)
	acked := time.Now()
	off := h.Get("Pico-Offset")
	if _, err := strconv.Atoi(off); err != nil {
		t.Fatalf("Pico-Offset %q", off)
	}
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := chromedp.Run(c, chromedp.Poll[chromedp.Void](
		`(document.querySelector('tr[data-offset="`+off+`"]')||{innerText:""}).innerText.includes("`+marker+`")`,
		chromedp.WithPollingTimeout(2*time.Second), chromedp.WithPollingInterval(10*time.Millisecond)))
	took := time.Since(acked)
	if err != nil {
		t.Fatalf("record at offset %s not shown within 2 s of its ack (%v): %v\npage: %s", off, took, err, pageText(ctx))
	}
	t.Logf("live tail showed the record %v after its ack", took.Round(time.Millisecond))
	screenshot(t, ctx, "stream")

	// The metrics page charts the appends of this node from two scrapes.
	go func() {
		for i := 0; i < 20; i++ {
			appendJSON(n.url+"/console/tail", `{"load":1}`)
		}
	}()
	do(t, ctx, 30*time.Second, "metrics page",
		chromedp.Navigate(n.url+"/_console/metrics"),
		waitJS(`[...document.querySelectorAll('figure p')].every(p => p.innerText.startsWith("latest"))`, 20*time.Second))
	screenshot(t, ctx, "metrics")
}

// TestConsoleDeepLink: a stream page's URL loads that page on a fresh
// browser (no navigation inside the app first), at the offset it names.
func TestConsoleDeepLink(t *testing.T) {
	n := serve(t, "solo", nil)
	mustStatus(t, 201, "PUT", n.url+"/deep/link/s", "", "text/plain", "")
	for i := 0; i < 5; i++ {
		mustStatus(t, 200, "POST", n.url+"/deep/link/s", "", "text/plain", fmt.Sprintf("line %d", i))
	}
	ctx := browser(t)
	do(t, ctx, 30*time.Second, "load the deep link",
		chromedp.Navigate(n.url+"/_console/streams/deep/link/s?offset=3"),
		waitJS(`document.querySelector('h1') && document.querySelector('h1').innerText === "/deep/link/s" && document.querySelector('tr[data-offset="3"]')`, 20*time.Second))
	if got := eval[string](t, ctx, `document.querySelector('tr[data-offset="3"]').innerText`); !strings.Contains(got, "line 3") {
		t.Errorf("offset 3 row %q", got)
	}
	if eval[bool](t, ctx, `!!document.querySelector('tr[data-offset="2"]')`) {
		t.Errorf("the page shows offset 2, before the linked offset 3")
	}
	screenshot(t, ctx, "deep-link")

	// Phone width: the same page, nothing wider than the screen.
	do(t, ctx, 30*time.Second, "phone width", chromedp.EmulateViewport(390, 844), chromedp.Reload(),
		waitJS(`document.querySelector('tr[data-offset="3"]')`, 20*time.Second))
	if w := eval[int](t, ctx, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("page is %d px wide at a 390 px viewport", w)
	}
	screenshot(t, ctx, "stream-phone")
}

// TestConsoleAuthPrompt: with auth on, the console without a token shows
// the token prompt and nothing else, and asks the node for no data (the
// one API call is the authorisation probe, answered 401); with the
// token, typed into the prompt, it lists the streams.
func TestConsoleAuthPrompt(t *testing.T) {
	const token = "pmq_console_e2e_admin"
	n := serve(t, "secure", nil, "--auth-tokens", tokenFile(t, token))
	mustStatus(t, 201, "PUT", n.url+"/secret/stream", token, "text/plain", "")
	ctx := browser(t)
	do(t, ctx, 30*time.Second, "open the console without a token",
		chromedp.Navigate(n.url+"/_console/streams"),
		waitJS(`document.getElementById('token-form')`, 20*time.Second))
	text := pageText(ctx)
	if strings.Contains(text, "/secret/stream") || eval[bool](t, ctx, `!!document.querySelector('#streams, tr[data-stream]')`) {
		t.Errorf("data shown without a token: %s", text)
	}
	calls := eval[[]string](t, ctx, `performance.getEntriesByType("resource").map(e => new URL(e.name).pathname).filter(p => !p.startsWith("/_console/"))`)
	for _, p := range calls {
		if p != "/_sys/cluster" {
			t.Errorf("the console asked for %s without a token", p)
		}
	}
	screenshot(t, ctx, "token-prompt")

	do(t, ctx, 30*time.Second, "enter the token",
		chromedp.SendKeys("#token", token),
		chromedp.Click("#token-form button[type=submit]"),
		waitJS(`document.querySelector('tr[data-stream="/secret/stream"]')`, 20*time.Second))
	if got := eval[string](t, ctx, `sessionStorage.getItem("picomq.console.token")`); got != token {
		t.Errorf("session storage holds %q", got)
	}
	for _, u := range eval[[]string](t, ctx, `performance.getEntriesByType("resource").map(e => e.name)`) {
		if strings.Contains(u, token) {
			t.Errorf("the token went into a URL: %s", u)
		}
	}
}
