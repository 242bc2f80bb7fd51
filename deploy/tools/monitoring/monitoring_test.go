// Package monitoring tests deploy/monitoring offline with promtool: the
// alert rules load, each alert has a firing and a silent promtool test
// case, every dashboard query is valid PromQL, and the scrape
// configuration loads. e2e TestMonitoringMetricsExist checks the other
// half: that every metric they name exists on a running node.
package monitoring

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/PicoMQ/picomq/deploy/tools/internal/tool"
)

const dir = "../../monitoring"

func promtool(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(tool.Path(t, "promtool"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestRulesCheck(t *testing.T) {
	promtool(t, "check", "rules", filepath.Join(dir, "alerts.yml"))
}

func TestRulesUnitTests(t *testing.T) {
	promtool(t, "test", "rules", filepath.Join(dir, "alerts_test.yml"))
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Interval      string `json:"interval"`
		InputSeries   []any  `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertFiresAndStaysSilent: promtool passes a test file whatever
// it leaves out, so this checks that each alert has a case that expects it
// to fire and one that expects silence, and that each alert has a
// severity and a summary.
func TestEveryAlertFiresAndStaysSilent(t *testing.T) {
	var rf ruleFile
	readYAML(t, filepath.Join(dir, "alerts.yml"), &rf)
	var rt ruleTests
	readYAML(t, filepath.Join(dir, "alerts_test.yml"), &rt)
	fires, silent := map[string]int{}, map[string]int{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname]++
			} else {
				silent[a.Alertname]++
			}
		}
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if fires[r.Alert] == 0 || silent[r.Alert] == 0 {
				t.Errorf("alert %s: %d firing and %d silent test cases, want at least one of each", r.Alert, fires[r.Alert], silent[r.Alert])
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity, summary or description", r.Alert)
			}
		}
	}
	want := []string{"PicoMQOwnerLeaseLost", "PicoMQUnflushedBytesHigh", "PicoMQFlushStalled", "PicoMQFlushLagHigh", "PicoMQUploadErrors",
		"PicoMQWALFsyncSlow", "PicoMQDiskNearlyFull", "PicoMQEtcdQuotaNearlyFull", "PicoMQKafkaGroupLag", "PicoMQCertificateExpiring"}
	for _, a := range want {
		if fires[a] == 0 {
			t.Errorf("alert %s (docs/operations.md) has no firing test", a)
		}
	}
	if n < len(want) {
		t.Errorf("%d alerts, want at least %d", n, len(want))
	}
}

type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardQueries: every panel query of the Grafana dashboard is
// valid PromQL (promtool checks it as a recording rule), and panels do
// not repeat a title.
func TestDashboardQueries(t *testing.T) {
	var d dashboard
	b, err := os.ReadFile(filepath.Join(dir, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard without uid, title or panels")
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	titles := map[string]bool{}
	for i, p := range d.Panels {
		if titles[p.Title] {
			t.Errorf("panel title %q repeated", p.Title)
		}
		titles[p.Title] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, tg := range p.Targets {
			// Grafana's $instance is substituted into a regex string
			// literal; a concrete value keeps the PromQL the same shape.
			expr := strings.ReplaceAll(tg.Expr, "$instance", ".*")
			q, _ := json.Marshal(expr)
			fmt.Fprintf(&rules, "      - record: dashboard:panel%d_%d\n        expr: %s\n", i, j, q)
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "rules", path)
}

// TestScrapeConfig: prometheus.yml loads (with its rule file), with the
// token and CA files it names present, as promtool wants them.
func TestScrapeConfig(t *testing.T) {
	tmp := t.TempDir()
	b, err := os.ReadFile(filepath.Join(dir, "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(b), "/etc/prometheus/secrets/", tmp+"/")
	for f, content := range map[string][]byte{"picomq-scrape-token": []byte("pmq_scrape\n"), "picomq-ca.pem": selfSignedPEM(t)} {
		if !strings.Contains(cfg, tmp+"/"+f) {
			t.Fatalf("prometheus.yml does not name %s", f)
		}
		if err := os.WriteFile(filepath.Join(tmp, f), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(cfg, "credentials_file:") {
		t.Fatal("prometheus.yml sends no bearer token")
	}
	alerts, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "alerts.yml"), alerts, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tmp, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, "check", "config", path)
}

// selfSignedPEM is a CA certificate, so the CA file parses if promtool
// reads it.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "picomq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
