package tftests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The stand-ins for what AWS provides when the module is applied.
const (
	testAccount = "123456789012"
	testRegion  = "us-east-1"
	testKMSKey  = "arn:aws:kms:us-east-1:123456789012:key/0000aaaa-bbbb-cccc-dddd-eeeeffff0000"
)

// awsEvaluator evaluates terraform/modules/aws with vars and stand-ins for
// the resources and data sources its policies and user data refer to, the
// SSM parameters' names evaluated from their own resource blocks.
func awsEvaluator(t *testing.T, vars map[string]cty.Value, bucket string, index int) *Evaluator {
	t.Helper()
	m, err := Load("../modules/aws")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]cty.Value{
		"name": cty.StringVal("test"), "vpc_id": cty.StringVal("vpc-0"), "subnet_ids": cty.ListVal([]cty.Value{cty.StringVal("subnet-0")}),
		"allowed_cidrs": cty.ListVal([]cty.Value{cty.StringVal("10.0.0.0/8")}),
		"binary_sha256": cty.StringVal(strings.Repeat("0", 64)), "etcd_sha256": cty.StringVal(strings.Repeat("0", 64)),
		"binary_url": cty.StringVal("https://example.invalid/picomq"),
	}
	for k, v := range vars {
		base[k] = v
	}
	for k := range base {
		if m.Variables[k] == nil {
			t.Fatalf("%q is not a module variable", k)
		}
	}
	nodeCount := 3
	if v, ok := base["node_count"]; ok {
		n, _ := v.AsBigFloat().Int64()
		nodeCount = int(n)
	}
	enis := func(n int, first int) cty.Value {
		var l []cty.Value
		for i := range n {
			l = append(l, cty.ObjectVal(map[string]cty.Value{"private_ip": cty.StringVal(fmt.Sprintf("10.0.0.%d", first+i)), "id": cty.StringVal(fmt.Sprintf("eni-%d", first+i))}))
		}
		return cty.TupleVal(l)
	}
	var vols []cty.Value
	for i := range 3 {
		vols = append(vols, cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal(fmt.Sprintf("vol-0%d", i))}))
	}
	express := cty.EmptyTupleVal
	if az, ok := base["express_one_zone_az_id"]; ok && az.AsString() != "" {
		name := "test--" + az.AsString() + "--x-s3"
		express = cty.TupleVal([]cty.Value{cty.ObjectVal(map[string]cty.Value{
			"bucket": cty.StringVal(name), "arn": cty.StringVal("arn:aws:s3express:" + testRegion + ":" + testAccount + ":bucket/" + name)})})
	}
	roots := map[string]cty.Value{
		"data": cty.ObjectVal(map[string]cty.Value{
			"aws_partition":       cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"partition": cty.StringVal("aws")})}),
			"aws_caller_identity": cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"account_id": cty.StringVal(testAccount)})}),
			"aws_region":          cty.ObjectVal(map[string]cty.Value{"current": cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(testRegion), "region": cty.StringVal(testRegion)})}),
			"aws_ssm_parameter":   cty.ObjectVal(map[string]cty.Value{"al2023": cty.ObjectVal(map[string]cty.Value{"value": cty.StringVal("ami-0")})}),
		}),
		"aws_s3_bucket":           cty.ObjectVal(map[string]cty.Value{"segments": cty.ObjectVal(map[string]cty.Value{"arn": cty.StringVal("arn:aws:s3:::" + bucket), "id": cty.StringVal(bucket), "bucket": cty.StringVal(bucket)})}),
		"aws_s3_directory_bucket": cty.ObjectVal(map[string]cty.Value{"express": express}),
		"aws_network_interface":   cty.ObjectVal(map[string]cty.Value{"node": enis(nodeCount, 10), "etcd": enis(3, 100)}),
		"aws_ebs_volume":          cty.ObjectVal(map[string]cty.Value{"etcd": cty.TupleVal(vols)}),
	}
	e, err := NewEvaluator("../modules/aws", base, roots, index)
	if err != nil {
		t.Fatal(err)
	}
	// The parameters' names, from their resource blocks (count/for_each).
	params := map[string]cty.Value{}
	for _, body := range e.files {
		for _, b := range body.Blocks {
			if b.Type != "resource" || b.Labels[0] != "aws_ssm_parameter" {
				continue
			}
			params[b.Labels[1]] = e.instances(t, b)
		}
	}
	e.Ctx.Variables["aws_ssm_parameter"] = cty.ObjectVal(params)
	e.evalLocals()
	return e
}

// instances evaluates the name of each instance of an aws_ssm_parameter
// block: a tuple for count, an object for for_each, an object for one.
func (e *Evaluator) instances(t *testing.T, b *hclsyntax.Block) cty.Value {
	t.Helper()
	one := func(ctx *hcl.EvalContext) cty.Value {
		v, diags := b.Body.Attributes["name"].Expr.Value(ctx)
		if diags.HasErrors() {
			t.Fatalf("aws_ssm_parameter.%s name: %s", b.Labels[1], diags.Error())
		}
		arn := "arn:aws:ssm:" + testRegion + ":" + testAccount + ":parameter" + v.AsString()
		return cty.ObjectVal(map[string]cty.Value{"name": v, "arn": cty.StringVal(arn)})
	}
	if c, ok := b.Body.Attributes["count"]; ok {
		n, diags := c.Expr.Value(e.Ctx)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		count, _ := n.AsBigFloat().Int64()
		var l []cty.Value
		for i := range count {
			ctx := e.Ctx.NewChild()
			ctx.Variables = map[string]cty.Value{"count": cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(i)})}
			l = append(l, one(ctx))
		}
		return cty.TupleVal(l)
	}
	if fe, ok := b.Body.Attributes["for_each"]; ok {
		set, diags := fe.Expr.Value(e.Ctx)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		m := map[string]cty.Value{}
		for it := set.ElementIterator(); it.Next(); {
			k, v := it.Element()
			if set.Type().IsSetType() {
				k = v
			}
			ctx := e.Ctx.NewChild()
			ctx.Variables = map[string]cty.Value{"each": cty.ObjectVal(map[string]cty.Value{"key": k, "value": v})}
			m[k.AsString()] = one(ctx)
		}
		return cty.ObjectVal(m)
	}
	return one(e.Ctx)
}

// renderUserData renders the user data of the resource's templatefile()
// call with the module's own arguments for instance index.
func renderUserData(t *testing.T, e *Evaluator, resource, template string) string {
	t.Helper()
	b, err := e.Block("resource", "aws_instance", resource)
	if err != nil {
		t.Fatal(err)
	}
	var call *hclsyntax.FunctionCallExpr
	hclsyntax.VisitAll(b.Body, func(n hclsyntax.Node) hcl.Diagnostics {
		if c, ok := n.(*hclsyntax.FunctionCallExpr); ok && c.Name == "templatefile" {
			call = c
		}
		return nil
	})
	if call == nil {
		t.Fatalf("aws_instance.%s: no templatefile call", resource)
	}
	values := map[string]cty.Value{}
	for _, item := range call.Args[1].(*hclsyntax.ObjectConsExpr).Items {
		k, _ := item.KeyExpr.Value(nil)
		v, diags := item.ValueExpr.Value(e.Ctx)
		if diags.HasErrors() {
			t.Fatalf("aws_instance.%s: template argument %s: %s", resource, k.AsString(), diags.Error())
		}
		values[k.AsString()] = v
	}
	path := filepath.Join(repo, "deploy/cloud-init", template)
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	expr, diags := hclsyntax.ParseTemplate(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	out, diags := expr.Value(&hcl.EvalContext{Variables: values})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return out.AsString()
}

var (
	s3CopyFrom = regexp.MustCompile(`"\$AWS" s3 cp .*?'(s3://[^']+)'`)
	backupExec = regexp.MustCompile(`(?m)^ExecStart=/usr/local/sbin/etcd-backup (s3://\S+)`)
)

// scriptCalls lists the AWS calls a rendered user-data script makes: the
// SSM parameters of its refresh list (picomq-refresh/etcd-refresh read
// each with ssm:GetParameter, at boot and on their timer), the binary it
// copies from S3, and the snapshots etcd-backup writes.
func scriptCalls(t *testing.T, script, origin string, kmsKey string) []Request {
	t.Helper()
	ssm := func(name string) Request {
		return Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:" + testRegion + ":" + testAccount + ":parameter" + name, Origin: origin + " refresh list"}
	}
	var out []Request
	inList := false
	for _, line := range strings.Split(script, "\n") {
		switch {
		case strings.Contains(line, "refresh.list") && (strings.HasSuffix(line, "<<LIST") || strings.HasSuffix(line, "<<'LIST'")):
			inList = true
		case inList && strings.TrimSpace(line) == "LIST":
			inList = false
		case inList && strings.TrimSpace(line) != "":
			out = append(out, ssm(strings.Fields(line)[0]))
		}
	}
	if inList {
		t.Fatalf("%s: refresh list never ends", origin)
	}
	for _, m := range s3CopyFrom.FindAllStringSubmatch(script, -1) {
		out = append(out, Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::" + strings.TrimPrefix(m[1], "s3://"), Origin: origin + " aws s3 cp"})
	}
	for _, m := range backupExec.FindAllStringSubmatch(script, -1) {
		// etcd-backup.sh: `"$AWS" s3 cp … "$URI/$name"`, name a UTC time.
		obj := strings.TrimPrefix(m[1], "s3://") + "/20260101T000000Z.db"
		out = append(out, Request{Action: "s3:PutObject", Resource: "arn:aws:s3:::" + obj, Origin: origin + " etcd-backup"})
		if kmsKey != "" {
			out = append(out, Request{Action: "kms:GenerateDataKey", Resource: kmsKey, Origin: origin + " etcd-backup (bucket SSE-KMS)"})
		}
	}
	return out
}

// TestBootScriptPermissions renders the nodes' and the etcd members' user
// data as the module does and evaluates every AWS call the scripts make
// against the policy of the instance's own role, parsed from iam.tf: a
// call the policy would deny fails the test (a node that cannot read its
// certificate, an etcd member whose snapshots are refused).
func TestBootScriptPermissions(t *testing.T) {
	backup := readFile(t, filepath.Join(repo, "deploy/etcd-backup.sh"))
	if !strings.Contains(backup, `"$AWS" s3 cp --only-show-errors "$tmp/snapshot.db" "$URI/$name"`) {
		t.Fatal("deploy/etcd-backup.sh no longer uploads with `aws s3 cp … \"$URI/$name\"`: update scriptCalls")
	}
	for _, c := range []struct {
		name string
		vars map[string]cty.Value
	}{
		{"defaults", nil},
		{"kms and binary in s3", map[string]cty.Value{"kms_key_arn": cty.StringVal(testKMSKey), "binary_url": cty.StringVal(""),
			"binary_s3_uri": cty.StringVal("s3://releases-bucket/picomq/v1/picomq-linux-amd64")}},
		{"own token parameter", map[string]cty.Value{"auth_tokens_parameter": cty.StringVal("/shared/picomq-tokens")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kms := ""
			if v, ok := c.vars["kms_key_arn"]; ok {
				kms = v.AsString()
			}
			checked := 0
			for i := range 3 {
				e := awsEvaluator(t, c.vars, "test-segments-"+testAccount, i)
				for _, role := range []struct{ policy, resource, template string }{
					{"nodes", "node", "picomq-node.sh.tftpl"},
					{"etcd", "etcd", "etcd-node.sh.tftpl"},
				} {
					policy, err := e.Policy(role.policy)
					if err != nil {
						t.Fatal(err)
					}
					script := renderUserData(t, e, role.resource, role.template)
					calls := scriptCalls(t, script, fmt.Sprintf("%s %d user data", role.resource, i), kms)
					if len(calls) < 3 {
						t.Fatalf("%s %d: only %d AWS calls found in the user data: the parser no longer sees them", role.resource, i, len(calls))
					}
					for _, r := range calls {
						checked++
						if _, ok := Allowed(policy, r); !ok {
							t.Errorf("denied by the %s role: %v", role.policy, r)
						}
					}
				}
			}
			t.Logf("%d calls allowed", checked)
		})
	}
}

// TestPolicyModel: the evaluator denies what IAM would (so the permission
// tests can fail): a HeadBucket-like ListBucket without a prefix, another
// cluster's prefix, another action, another node's private key, and
// allows the listing under the prefix and the node's own parameters.
func TestPolicyModel(t *testing.T) {
	e := awsEvaluator(t, nil, "b", 0)
	policy, err := e.Policy("nodes")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    Request
		want bool
	}{
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::b", Keys: map[string]string{"s3:prefix": "test/"}}, true},
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::b", Keys: map[string]string{"s3:prefix": "test/l0/n1/"}}, true},
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::b"}, false}, // HeadBucket, or a listing without a prefix
		{Request{Action: "s3:ListBucket", Resource: "arn:aws:s3:::b", Keys: map[string]string{"s3:prefix": "other/"}}, false},
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::b/test/streams/1/0"}, true},
		{Request{Action: "s3:GetObject", Resource: "arn:aws:s3:::b/test-etcd-backups/test-etcd-0/x.db"}, false},
		{Request{Action: "S3:getobject", Resource: "arn:aws:s3:::b/test/x"}, true},
		{Request{Action: "s3:PutBucketPolicy", Resource: "arn:aws:s3:::b"}, false},
		// Node 0's role reads its own key and the shared parameters, not node 1's key.
		{Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:" + testAccount + ":parameter/test/nodes/test-node-0.key"}, true},
		{Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:" + testAccount + ":parameter/test/nodes/test-node-0.etcd-client.key"}, true},
		{Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:" + testAccount + ":parameter/test/nodes/test-node-1.etcd-client.key"}, false},
		{Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:" + testAccount + ":parameter/test/nodes/test-node-1.key"}, false},
		{Request{Action: "ssm:GetParameter", Resource: "arn:aws:ssm:us-east-1:" + testAccount + ":parameter/test/etcd/test-etcd-0.key"}, false},
	} {
		if _, got := Allowed(policy, c.r); got != c.want {
			t.Errorf("%v: allowed %v, want %v", c.r, got, c.want)
		}
	}
}
