// Package helmchart tests deploy/helm/picomq offline: helm lint, helm
// template, and a strict decode of every rendered manifest into the
// Kubernetes API types, then what the StatefulSet gives each node.
package helmchart

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/PicoMQ/picomq/deploy/tools/internal/tool"
)

const (
	chart     = "../../helm/picomq"
	namespace = "streams"
	release   = "pq"
)

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool.Path(t, "helm"), args...)
	// No repository config or cache of the developer's is read or written.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func TestHelmLint(t *testing.T) {
	for _, values := range []string{"ci/cluster-values.yaml", "ci/single-node-values.yaml"} {
		if out, err := helm(t, "lint", "--strict", chart, "-f", chart+"/"+values); err != nil {
			t.Errorf("%s: %v\n%s", values, err, out)
		}
	}
}

// manifests is one render, decoded.
type manifests struct {
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	pdbs         map[string]*policyv1.PodDisruptionBudget
	accounts     map[string]*corev1.ServiceAccount
	monitors     map[string]*serviceMonitor
}

// serviceMonitor is the subset of prometheus-operator's ServiceMonitor
// (monitoring.coreos.com/v1) the chart uses; decoding is strict, so a
// field outside it, or misspelt, fails the test.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port              string                    `json:"port"`
			Path              string                    `json:"path"`
			Interval          string                    `json:"interval"`
			Scheme            string                    `json:"scheme"`
			BearerTokenSecret *corev1.SecretKeySelector `json:"bearerTokenSecret"`
			TLSConfig         *struct {
				ServerName string `json:"serverName"`
				CA         struct {
					Secret *corev1.SecretKeySelector `json:"secret"`
				} `json:"ca"`
			} `json:"tlsConfig"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// render runs helm template and decodes every document strictly into its
// API type: an unknown or misspelt field, a wrong type or an unexpected
// kind fails.
func render(t *testing.T, args ...string) *manifests {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chart, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	m := &manifests{services: map[string]*corev1.Service{}, statefulSets: map[string]*appsv1.StatefulSet{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, accounts: map[string]*corev1.ServiceAccount{},
		monitors: map[string]*serviceMonitor{}}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(out, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s %s does not decode strictly: %v\n%s", head.APIVersion, head.Kind, err, doc)
			}
		}
		switch head.APIVersion + " " + head.Kind {
		case "v1 Service":
			var o corev1.Service
			strict(&o)
			m.services[o.Name] = &o
		case "apps/v1 StatefulSet":
			var o appsv1.StatefulSet
			strict(&o)
			m.statefulSets[o.Name] = &o
		case "policy/v1 PodDisruptionBudget":
			var o policyv1.PodDisruptionBudget
			strict(&o)
			m.pdbs[o.Name] = &o
		case "v1 ServiceAccount":
			var o corev1.ServiceAccount
			strict(&o)
			m.accounts[o.Name] = &o
		case "monitoring.coreos.com/v1 ServiceMonitor":
			var o serviceMonitor
			strict(&o)
			m.monitors[o.Metadata.Name] = &o
		default:
			t.Fatalf("unexpected kind %s %s in the render", head.APIVersion, head.Kind)
		}
	}
	return m
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestHelmTemplateCluster renders the same values as a 1-node and a
// 5-node cluster and checks each pod as the node would see it.
func TestHelmTemplateCluster(t *testing.T) {
	flags := configFlags(t)
	for _, n := range []int{1, 5} {
		t.Run(fmt.Sprintf("%d-nodes", n), func(t *testing.T) {
			m := render(t, "-f", chart+"/ci/cluster-values.yaml", "--set", "replicas="+strconv.Itoa(n))
			sts := m.statefulSets["pq-picomq"]
			if sts == nil {
				t.Fatalf("no StatefulSet pq-picomq; have %v", keys(m.statefulSets))
			}
			if sts.Spec.Replicas == nil || int(*sts.Spec.Replicas) != n {
				t.Fatalf("replicas %v, want %d", sts.Spec.Replicas, n)
			}
			checkNodes(t, m, sts, n, "https", flags)
			checkEtcd(t, m, sts)
			pdb := m.pdbs["pq-picomq"]
			if n == 1 && pdb != nil {
				t.Errorf("a PodDisruptionBudget for a single node would block every voluntary eviction")
			}
			if n > 1 {
				if pdb == nil {
					t.Fatal("no PodDisruptionBudget")
				}
				sel, err := metav1LabelSelector(pdb.Spec.Selector.MatchLabels)
				if err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
					t.Errorf("PDB selector %v does not select the nodes %v", pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
				}
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PDB maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
				}
			}
			sa := m.accounts["pq-picomq"]
			if sa == nil || sa.Annotations["eks.amazonaws.com/role-arn"] == "" || sts.Spec.Template.Spec.ServiceAccountName != "pq-picomq" {
				t.Errorf("IRSA: service account %v, pods use %q", sa, sts.Spec.Template.Spec.ServiceAccountName)
			}
			sm := m.monitors["pq-picomq"]
			if sm == nil || len(sm.Spec.Endpoints) != 1 {
				t.Fatal("no ServiceMonitor with one endpoint")
			}
			ep := sm.Spec.Endpoints[0]
			if ep.Path != "/metrics" || ep.Scheme != "https" || ep.BearerTokenSecret == nil || ep.BearerTokenSecret.Name != "picomq-scrape-token" ||
				ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil {
				t.Errorf("ServiceMonitor endpoint %+v", ep)
			}
			if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(m.services["pq-picomq-headless"].Labels)) {
				t.Errorf("ServiceMonitor selects %v, not the Service labels %v", sm.Spec.Selector.MatchLabels, m.services["pq-picomq-headless"].Labels)
			}
			svc := m.services["pq-picomq"]
			if svc == nil || svc.Spec.ClusterIP == "None" || !selects(svc.Spec.Selector, sts) {
				t.Errorf("client Service %v does not front the nodes", svc)
			}
		})
	}
}

// TestHelmTemplateSingleNode: one node with embedded etcd, no object store
// (file:// on its volume), an emptyDir data volume and Kafka off.
func TestHelmTemplateSingleNode(t *testing.T) {
	flags := configFlags(t)
	m := render(t, "-f", chart+"/ci/single-node-values.yaml")
	sts := m.statefulSets["pq-picomq"]
	if sts == nil || len(m.statefulSets) != 1 {
		t.Fatalf("StatefulSets %v, want only pq-picomq", keys(m.statefulSets))
	}
	env := checkNodes(t, m, sts, 1, "http", flags)[0]
	for _, unset := range []string{"PICOMQ_ETCD_ENDPOINTS", "PICOMQ_OBJECT_STORE", "PICOMQ_AUTH_TOKENS"} {
		if _, ok := env[unset]; ok {
			t.Errorf("%s set on a single node: %q", unset, env[unset])
		}
	}
	if env["PICOMQ_KAFKA_ADDR"] != "off" || env["PICOMQ_INSECURE_NO_AUTH"] != "true" {
		t.Errorf("kafka %q insecure-no-auth %q", env["PICOMQ_KAFKA_ADDR"], env["PICOMQ_INSECURE_NO_AUTH"])
	}
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Errorf("persistence off but volumeClaimTemplates %v", sts.Spec.VolumeClaimTemplates)
	}
	if len(m.monitors) != 0 || len(m.pdbs) != 0 {
		t.Errorf("ServiceMonitors %v PDBs %v on a default single node", keys(m.monitors), keys(m.pdbs))
	}
}

// TestHelmRefusesBrokenValues: values that would render a cluster that
// cannot work are refused with a message naming the value.
func TestHelmRefusesBrokenValues(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--set", "auth.insecureNoAuth=true"}, "objectStore is required"},
		{[]string{"--set", "auth.insecureNoAuth=true,objectStore=s3://b?region=r"}, "needs a shared etcd"},
		{[]string{"--set", "replicas=1"}, "auth.tokensSecret is required"},
		{[]string{"-f", chart + "/ci/cluster-values.yaml", "--set", "terminationGracePeriodSeconds=20"}, "terminationGracePeriodSeconds 20 is below"},
		{[]string{"-f", chart + "/ci/cluster-values.yaml", "--set", "etcd.bundled.image.repository="}, "etcd.bundled.image.repository is required"},
		{[]string{"-f", chart + "/ci/cluster-values.yaml", "--set", "replica=3"}, "additional properties 'replica' not allowed"},
		{[]string{"-f", chart + "/ci/cluster-values.yaml", "--set", "config.durability=fast"}, "durability"},
		{[]string{"-f", chart + "/ci/cluster-values.yaml", "--set", "config.leaseTTL=5"}, "leaseTTL"},
	}
	for _, c := range cases {
		out, err := helm(t, append([]string{"template", release, chart, "--namespace", namespace}, c.args...)...)
		if err == nil {
			t.Errorf("%v rendered:\n%.400s", c.args, out)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error does not say %q: %v", c.args, c.want, err)
		}
	}
}

// checkNodes resolves each pod's environment as the kubelet would and
// checks what `picomq serve` gets: a unique node id (the pod name), an
// advertise URL that is the pod's own DNS name in the headless Service on
// the HTTP port, a data dir on the data volume, only settings that exist
// (docs/configuration.md), probes and a grace period that covers the
// drain. It returns each pod's resolved environment.
func checkNodes(t *testing.T, m *manifests, sts *appsv1.StatefulSet, n int, scheme string, flags map[string]bool) []map[string]string {
	t.Helper()
	headless := m.services[sts.Spec.ServiceName]
	if headless == nil || headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q: headless Service with published not-ready addresses missing: %+v", sts.Spec.ServiceName, headless)
	}
	if !selects(headless.Spec.Selector, sts) {
		t.Fatalf("headless Service selector %v does not select pods %v", headless.Spec.Selector, sts.Spec.Template.Labels)
	}
	sel, err := metav1LabelSelector(sts.Spec.Selector.MatchLabels)
	if err != nil || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Fatalf("StatefulSet selector %v does not match its pod labels %v", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	httpPort := portNamed(t, c, "http")
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot ||
		pod.SecurityContext.RunAsUser == nil || *pod.SecurityContext.RunAsUser == 0 {
		t.Errorf("pod security context does not run as non-root: %+v", pod.SecurityContext)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" ||
		c.ReadinessProbe.HTTPGet.Port.String() != "http" || strings.ToLower(string(c.ReadinessProbe.HTTPGet.Scheme)) != scheme {
		t.Errorf("readiness probe %+v, want /readyz on http over %s", c.ReadinessProbe, scheme)
	}
	seen := map[string]bool{}
	var envs []map[string]string
	for i := 0; i < n; i++ {
		podName := fmt.Sprintf("%s-%d", sts.Name, i)
		env := resolveEnv(t, c.Env, podName, namespace)
		envs = append(envs, env)
		for k := range env {
			if !strings.HasPrefix(k, "PICOMQ_") {
				continue
			}
			flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "PICOMQ_")), "_", "-")
			if !flags[flag] {
				t.Errorf("%s sets %s, but docs/configuration.md has no --%s", podName, k, flag)
			}
		}
		id := env["PICOMQ_NODE_ID"]
		if id != podName || seen[id] {
			t.Errorf("pod %s: node id %q (unique pod name wanted)", podName, id)
		}
		seen[id] = true
		u, err := url.Parse(env["PICOMQ_ADVERTISE_URL"])
		wantHost := fmt.Sprintf("%s.%s.%s.svc.cluster.local", podName, headless.Name, namespace)
		if err != nil || u.Scheme != scheme || u.Hostname() != wantHost || u.Port() != strconv.Itoa(int(httpPort)) {
			t.Errorf("pod %s: advertise URL %q, want %s://%s:%d", podName, env["PICOMQ_ADVERTISE_URL"], scheme, wantHost, httpPort)
		}
		if _, port, _ := strings.Cut(env["PICOMQ_HTTP_ADDR"], ":"); port != strconv.Itoa(int(httpPort)) {
			t.Errorf("pod %s: --http-addr %q is not the container port %d", podName, env["PICOMQ_HTTP_ADDR"], httpPort)
		}
		if ka := env["PICOMQ_KAFKA_ADVERTISE_ADDR"]; ka != "" {
			if want := fmt.Sprintf("%s:%d", wantHost, portNamed(t, c, "kafka")); ka != want {
				t.Errorf("pod %s: Kafka advertise %q, want %q", podName, ka, want)
			}
		}
	}
	// The data dir is the data volume: a claim per pod, or an emptyDir.
	dataDir := envs[0]["PICOMQ_DATA_DIR"]
	mounted := false
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == dataDir && vm.Name == "data" && !vm.ReadOnly {
			mounted = true
		}
	}
	if dataDir == "" || !mounted {
		t.Errorf("data dir %q is not a writable mount of volume data: %+v", dataDir, c.VolumeMounts)
	}
	fromClaim := false
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		if pvc.Name == "data" && !pvc.Spec.Resources.Requests.Storage().IsZero() {
			fromClaim = true
		}
	}
	fromPod := false
	for _, v := range pod.Volumes {
		if v.Name == "data" && v.EmptyDir != nil {
			fromPod = true
		}
	}
	if fromClaim == fromPod {
		t.Errorf("volume data: from a claim %v, an emptyDir %v; want exactly one", fromClaim, fromPod)
	}
	// Secrets: the token file and the certificate are files in mounted Secrets.
	for _, f := range []string{"PICOMQ_AUTH_TOKENS", "PICOMQ_TLS_CERT", "PICOMQ_TLS_KEY"} {
		if p := envs[0][f]; p != "" && !secretMounted(pod, c, p) {
			t.Errorf("%s=%s is not in a mounted Secret", f, p)
		}
	}
	// The grace period covers the preStop sleep plus the bounded drain.
	shutdown, err := time.ParseDuration(envs[0]["PICOMQ_SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("PICOMQ_SHUTDOWN_TIMEOUT: %v", err)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("no preStop sleep: %+v", c.Lifecycle)
	}
	need := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + shutdown
	if pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= need {
		t.Errorf("terminationGracePeriodSeconds %v does not cover preStop + shutdown timeout %s", pod.TerminationGracePeriodSeconds, need)
	}
	return envs
}

// checkEtcd: the nodes' endpoints are exactly the bundled members, and
// each member's initial cluster lists them all.
func checkEtcd(t *testing.T, m *manifests, nodes *appsv1.StatefulSet) {
	t.Helper()
	etcd := m.statefulSets["pq-picomq-etcd"]
	if etcd == nil || etcd.Spec.Replicas == nil || *etcd.Spec.Replicas != 3 {
		t.Fatalf("bundled etcd StatefulSet with 3 members missing: %v", etcd)
	}
	if svc := m.services[etcd.Spec.ServiceName]; svc == nil || svc.Spec.ClusterIP != "None" || !selects(svc.Spec.Selector, etcd) {
		t.Fatalf("etcd headless Service %q missing or not selecting the members", etcd.Spec.ServiceName)
	}
	env := resolveEnv(t, nodes.Spec.Template.Spec.Containers[0].Env, nodes.Name+"-0", namespace)
	var want []string
	for i := 0; i < 3; i++ {
		want = append(want, fmt.Sprintf("http://pq-picomq-etcd-%d.%s.%s.svc.cluster.local:2379", i, etcd.Spec.ServiceName, namespace))
	}
	if got := env["PICOMQ_ETCD_ENDPOINTS"]; got != strings.Join(want, ",") {
		t.Errorf("etcd endpoints %q, want %q", got, strings.Join(want, ","))
	}
	args := strings.Join(etcd.Spec.Template.Spec.Containers[0].Args, " ")
	for i := 0; i < 3; i++ {
		member := fmt.Sprintf("pq-picomq-etcd-%d=http://pq-picomq-etcd-%d.%s.%s.svc.cluster.local:2380", i, i, etcd.Spec.ServiceName, namespace)
		if !strings.Contains(args, member) {
			t.Errorf("etcd initial cluster lacks %s: %s", member, args)
		}
	}
}

// resolveEnv evaluates a container's env for one pod: fieldRefs of the
// pod's name and namespace, and $(VAR) references to earlier variables,
// as the kubelet does.
func resolveEnv(t *testing.T, vars []corev1.EnvVar, pod, ns string) map[string]string {
	t.Helper()
	env := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, v := range vars {
		switch {
		case v.ValueFrom != nil && v.ValueFrom.FieldRef != nil:
			switch v.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[v.Name] = pod
			case "metadata.namespace":
				env[v.Name] = ns
			default:
				t.Fatalf("env %s: unexpected fieldRef %s", v.Name, v.ValueFrom.FieldRef.FieldPath)
			}
		case v.ValueFrom != nil:
			env[v.Name] = "<from " + v.Name + ">"
		default:
			env[v.Name] = ref.ReplaceAllStringFunc(v.Value, func(s string) string {
				name := ref.FindStringSubmatch(s)[1]
				val, ok := env[name]
				if !ok {
					t.Errorf("env %s refers to $(%s), which is not defined before it", v.Name, name)
				}
				return val
			})
		}
		if _, dup := env[v.Name+"\x00"]; dup {
			t.Errorf("env %s set twice", v.Name)
		}
		env[v.Name+"\x00"] = ""
	}
	for k := range env {
		if strings.HasSuffix(k, "\x00") {
			delete(env, k)
		}
	}
	return env
}

// configFlags are the flags of `picomq serve` documented in
// docs/configuration.md's table.
func configFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`--([a-z0-9-]+)`").FindAllStringSubmatch(cell, -1) {
			flags[m[1]] = true
		}
	}
	if !flags["node-id"] || !flags["advertise-url"] || !flags["tls-key"] {
		t.Fatalf("could not read the flag table of docs/configuration.md: %v", flags)
	}
	return flags
}

func portNamed(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container has no port %q: %+v", name, c.Ports)
	return 0
}

func secretMounted(pod corev1.PodSpec, c corev1.Container, file string) bool {
	for _, vm := range c.VolumeMounts {
		if !strings.HasPrefix(file, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName != "" {
				return true
			}
		}
	}
	return false
}

func selects(selector map[string]string, sts *appsv1.StatefulSet) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(sts.Spec.Template.Labels))
}

func metav1LabelSelector(m map[string]string) (labels.Selector, error) {
	if len(m) == 0 {
		return nil, fmt.Errorf("empty selector")
	}
	return labels.SelectorFromSet(m), nil
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
