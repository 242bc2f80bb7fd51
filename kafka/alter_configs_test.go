package kafka

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/PicoMQ/picomq/auth"
)

// TestAlterConfigsChecks: validate_only changes nothing; a duplicate name
// is INVALID_REQUEST; broker resources, a changed min.insync.replicas
// and APPEND are INVALID_CONFIG; a token without admin on the topic's
// streams is TOPIC_AUTHORIZATION_FAILED and changes nothing, and so is the
// node-to-node form of an alter (one partition stream) from a client.
func TestAlterConfigsChecks(t *testing.T) {
	store := tokenStore(t, "  - name: narrow\n    sha256: "+auth.HashToken("pmq_narrow-token-0123456789")+"\n    scopes: [\"admin:/other\"]\n")
	ts := startServer(t, Config{Auth: store})
	root := ts.client(kgo.SASL(plain.Auth{User: "u", Pass: "pmq_root-token-0123456789"}.AsMechanism()))
	ctx := context.Background()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "cfg", 2, 1
	req.Topics = append(req.Topics, rt)
	if resp, err := req.RequestWith(ctx, root); err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create: %v %+v", err, resp)
	}
	alter := func(cl *kgo.Client, typ kmsg.ConfigResourceType, validate bool, cs ...kmsg.IncrementalAlterConfigsRequestResourceConfig) int16 {
		t.Helper()
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		req.ValidateOnly = validate
		rr := kmsg.NewIncrementalAlterConfigsRequestResource()
		rr.ResourceType, rr.ResourceName, rr.Configs = typ, "cfg", cs
		req.Resources = append(req.Resources, rr)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Resources[0].ErrorCode
	}
	set := func(name, value string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Value, c.Op = name, &value, kmsg.IncrementalAlterConfigOpSet
		return c
	}
	retention := func() int64 {
		t.Helper()
		in, err := ts.env.Svc.Head(ctx, "/cfg/1")
		if err != nil {
			t.Fatal(err)
		}
		return in.RetentionMs
	}
	if c := alter(root, kmsg.ConfigResourceTypeTopic, true, set("retention.ms", "60000")); c != 0 || retention() != 0 {
		t.Fatalf("validate_only: error %d, retention.ms %d (want 0, unchanged)", c, retention())
	}
	appendOp := set("retention.ms", "1")
	appendOp.Op = kmsg.IncrementalAlterConfigOpAppend
	for _, tc := range []struct {
		typ  kmsg.ConfigResourceType
		cs   []kmsg.IncrementalAlterConfigsRequestResourceConfig
		want *kerr.Error
	}{
		{kmsg.ConfigResourceTypeTopic, []kmsg.IncrementalAlterConfigsRequestResourceConfig{set("retention.ms", "1"), set("retention.ms", "2")}, kerr.InvalidRequest},
		{kmsg.ConfigResourceTypeBroker, []kmsg.IncrementalAlterConfigsRequestResourceConfig{set("num.partitions", "3")}, kerr.InvalidConfig},
		{kmsg.ConfigResourceTypeTopic, []kmsg.IncrementalAlterConfigsRequestResourceConfig{set("min.insync.replicas", "2")}, kerr.InvalidConfig},
		{kmsg.ConfigResourceTypeTopic, []kmsg.IncrementalAlterConfigsRequestResourceConfig{appendOp}, kerr.InvalidConfig},
		{kmsg.ConfigResourceTypeTopic, []kmsg.IncrementalAlterConfigsRequestResourceConfig{set("retention.ms", "-5")}, kerr.InvalidConfig},
	} {
		if c := alter(root, tc.typ, false, tc.cs...); c != tc.want.Code {
			t.Errorf("%+v: error %v, want %v", tc.cs, kerr.ErrorForCode(c), tc.want)
		}
	}
	// Configs an alter cannot change are accepted at the topic's value.
	if c := alter(root, kmsg.ConfigResourceTypeTopic, false, set("min.insync.replicas", "1"), set("cleanup.policy", "delete"),
		set("compression.type", "producer"), set("unclean.leader.election.enable", "false"), set("flush.ms", "5")); c != 0 {
		t.Errorf("non-alterable configs at their values: %v", kerr.ErrorForCode(c))
	}
	narrow := ts.client(kgo.SASL(plain.Auth{User: "u", Pass: "pmq_narrow-token-0123456789"}.AsMechanism()))
	if c := alter(narrow, kmsg.ConfigResourceTypeTopic, false, set("retention.ms", "60000")); c != kerr.TopicAuthorizationFailed.Code {
		t.Fatalf("a token without admin on the topic: %v, want TOPIC_AUTHORIZATION_FAILED", kerr.ErrorForCode(c))
	}
	if retention() != 0 {
		t.Fatalf("a refused alter changed retention.ms to %d", retention())
	}
	// The node-to-node form (one partition stream) is not a client's,
	// even one with admin:/.
	fwd := kmsg.NewPtrIncrementalAlterConfigsRequest()
	fr := kmsg.NewIncrementalAlterConfigsRequestResource()
	fr.ResourceType, fr.ResourceName, fr.Configs = kmsg.ConfigResourceTypeTopic, configStreamPrefix+"/cfg/1", []kmsg.IncrementalAlterConfigsRequestResourceConfig{set("retention.ms", "5")}
	fwd.Resources = append(fwd.Resources, fr)
	if resp, err := fwd.RequestWith(ctx, root); err != nil || resp.Resources[0].ErrorCode != kerr.TopicAuthorizationFailed.Code || retention() != 0 {
		t.Fatalf("forwarded form from a client: %v %+v, retention.ms %d", err, resp, retention())
	}
	if c := alter(root, kmsg.ConfigResourceTypeTopic, false, set("retention.ms", "60000")); c != 0 || retention() != 60000 {
		t.Fatalf("alter: error %d, retention.ms of partition 1 %d", c, retention())
	}
}
