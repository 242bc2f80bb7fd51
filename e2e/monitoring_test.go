package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"
)

// TestMonitoringMetricsExist scrapes a running node the way the shipped
// Prometheus configuration does (TLS, a scrape-only token) and fails if a
// metric named in deploy/monitoring/alerts.yml or the Grafana dashboard is
// not on /metrics. The node runs with TLS, tokens and Kafka, and a
// consumer group commits behind the end of a topic, so every metric the
// alerts need has a sample; the group lag and the certificate expiry are
// checked against what the test knows. The scrape-only token is refused
// everywhere else, Kafka included.
func TestMonitoringMetricsExist(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	const scrapeToken = "tok-scraper-0123456789"
	tokens := writeTokenFile(t, filepath.Join(dir, "tokens.yaml"), matrixTokens...)
	kafkaAddr := freeAddr(t)
	p, certFile, _ := startTLSNode(t, ca, dir, "--auth-tokens", tokens, "--kafka-addr", kafkaAddr)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A topic with 5 records and a group that committed offset 2: lag 3.
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), plainSASL(rootToken), kgo.DialTLSConfig(&tls.Config{RootCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ct := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "lagged", 1, 1
	ct.Topics = append(ct.Topics, rt)
	if resp, err := ct.RequestWith(ctx, cl); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic: %v %+v", err, resp)
	}
	for i := 0; i < 5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "lagged", Value: []byte("v" + strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Group, oc.Generation = "billing", -1
	otp := kmsg.NewOffsetCommitRequestTopic()
	otp.Topic = "lagged"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset = 0, 2
	otp.Partitions = append(otp.Partitions, op)
	oc.Topics = append(oc.Topics, otp)
	if resp, err := oc.RequestWith(ctx, cl); err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("offset commit: %v %+v", err, resp)
	}

	// The scrape-only token: /metrics yes, anything else no.
	client := ca.client()
	scrape := func() string {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+scrapeToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("scrape with the metrics token: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	for _, path := range []string{"/_sys/cluster", "/lagged", "/_streams"} {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+scrapeToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("GET %s with the scrape-only token: %d, want 403", path, resp.StatusCode)
		}
	}
	kctx, kcancel := context.WithTimeout(ctx, 10*time.Second)
	if err := kafkaRoundTrip(kctx, kafkaAddr, "lagged", "v0", plainSASL(scrapeToken), kgo.DialTLSConfig(&tls.Config{RootCAs: pool})); err == nil {
		t.Error("the scrape-only token was accepted by the Kafka listener")
	}
	kcancel()

	// Lag is computed at scrape time; the commit above is already applied.
	samples := parseExposition(scrape())
	if got := samples[`picomq_kafka_group_lag{group="billing",topic="lagged"}`]; got != 3 {
		t.Errorf("picomq_kafka_group_lag for billing/lagged = %v, want 3 (5 records, committed 2)", got)
	}
	notAfter := certNotAfter(t, certFile)
	if got := samples["picomq_tls_cert_not_after_timestamp_seconds"]; got != float64(notAfter.Unix()) {
		t.Errorf("picomq_tls_cert_not_after_timestamp_seconds = %v, want %d", got, notAfter.Unix())
	}
	if samples["picomq_data_dir_size_bytes"] <= 0 || samples["picomq_data_dir_available_bytes"] <= 0 ||
		samples["picomq_data_dir_available_bytes"] > samples["picomq_data_dir_size_bytes"] {
		t.Errorf("data dir size %v available %v", samples["picomq_data_dir_size_bytes"], samples["picomq_data_dir_available_bytes"])
	}
	if samples["picomq_etcd_db_size_bytes"] <= 0 || samples["picomq_etcd_db_quota_bytes"] < samples["picomq_etcd_db_size_bytes"] {
		t.Errorf("etcd db %v quota %v", samples["picomq_etcd_db_size_bytes"], samples["picomq_etcd_db_quota_bytes"])
	}
	if v, ok := samples["picomq_membership_lease_lost"]; !ok || v != 0 {
		t.Errorf("picomq_membership_lease_lost = %v (present %v), want 0 on a healthy node", v, ok)
	}

	names := map[string]bool{}
	for k := range samples {
		name, _, _ := strings.Cut(k, "{")
		names[name] = true
	}
	used := monitoringMetricNames(t)
	if len(used) < 15 {
		t.Fatalf("found only %d metric names in deploy/monitoring: %v", len(used), used)
	}
	for _, m := range used {
		if !names[m] {
			t.Errorf("%s is named in deploy/monitoring but not exported by the node", m)
		}
	}
}

// monitoringMetricNames are the node metric names (picomq_*, go_*,
// process_*) that the alert rules and the dashboard's queries use.
func monitoringMetricNames(t *testing.T) []string {
	t.Helper()
	var exprs []string
	b, err := os.ReadFile("../deploy/monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	b, err = os.ReadFile("../deploy/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	set := map[string]bool{}
	re := regexp.MustCompile(`\b((?:picomq|go|process)_[a-zA-Z0-9_]+)\b`)
	for _, e := range exprs {
		for _, m := range re.FindAllString(e, -1) {
			set[m] = true
		}
	}
	var out []string
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// parseExposition maps `name{labels}` (labels as printed) to each sample's
// value in the Prometheus text format.
func parseExposition(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out
}

func certNotAfter(t *testing.T, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal(fmt.Errorf("no PEM in %s", file))
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter
}
