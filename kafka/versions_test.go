package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/auth"
	"github.com/PicoMQ/picomq/record"
)

// TestOldFetchAndListOffsets: the versions kafka-python sends when told
// an old api_version (Fetch v0–v3, ListOffsets v0) are served: the stored
// magic-2 batches (clients that read by magic byte take them whatever the
// fetch version) and ListOffsets v0's offset list.
func TestOldFetchAndListOffsets(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("old", 1)
	rc := ts.raw()
	if r := produceRaw(t, rc, 1, "old", -1, -1, -1, 5); r.ErrorCode != 0 {
		t.Fatalf("produce: error %d", r.ErrorCode)
	}
	for _, v := range []int16{0, 1, 2, 3} {
		req := kmsg.NewPtrFetchRequest()
		req.SetVersion(v)
		req.MaxWaitMillis, req.MinBytes, req.MaxBytes = 100, 1, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "old"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = 2, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp := rc.roundTrip(req, int32(10+v)).(*kmsg.FetchResponse)
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch v%d: %+v", v, resp.Topics)
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.HighWatermark != 5 {
			t.Fatalf("fetch v%d: error %d, high watermark %d", v, p.ErrorCode, p.HighWatermark)
		}
		recs, err := record.DecodeRecords(p.RecordBatches, nil)
		if err != nil || len(recs) != 5 || recs[2].Offset != 2 {
			t.Fatalf("fetch v%d: %d records (%v)", v, len(recs), err)
		}
	}
	for _, ts := range []int64{listLatest, listEarliest} {
		req := kmsg.NewPtrListOffsetsRequest()
		req.SetVersion(0)
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "old"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp, rp.MaxNumOffsets = ts, 1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := rc.roundTrip(req, 20).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		want := int64(5)
		if ts == listEarliest {
			want = 0
		}
		if p.ErrorCode != 0 || len(p.OldStyleOffsets) != 1 || p.OldStyleOffsets[0] != want {
			t.Fatalf("ListOffsets v0 at %d: error %d, offsets %v; want [%d]", ts, p.ErrorCode, p.OldStyleOffsets, want)
		}
	}
}

// TestUnsupportedVersionAnswered: a key we serve at a version we do not
// (below our range, as kafka-python sends with an old api_version, or
// above it) gets UNSUPPORTED_VERSION in a response of its own version,
// naming what was asked, and the connection stays usable; acks=0 gets no
// answer. ApiVersions v0 and v3 (no negotiation first) both answer.
func TestUnsupportedVersionAnswered(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("uv", 1)
	rc := ts.raw()

	prod := produceRequest("uv", -1, -1, -1, 1)
	prod.SetVersion(13) // above Produce's 12 (v13 names the topic by id, here the zero one)
	pr := rc.roundTrip(prod, 1).(*kmsg.ProduceResponse)
	if len(pr.Topics) != 1 || pr.Topics[0].TopicID != prod.Topics[0].TopicID || len(pr.Topics[0].Partitions) != 1 ||
		pr.Topics[0].Partitions[0].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("produce v13: %+v, want UNSUPPORTED_VERSION for partition 0 of the topic asked", pr.Topics)
	}
	prod.Acks = 0
	rc.send(prod, 2) // no answer: the next response is the next request's

	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.SetVersion(1) // below OffsetCommit's 2
	oc.Group = "g"
	ot := kmsg.NewOffsetCommitRequestTopic()
	ot.Topic = "uv"
	op := kmsg.NewOffsetCommitRequestTopicPartition()
	op.Partition, op.Offset = 0, 1
	ot.Partitions = append(ot.Partitions, op)
	oc.Topics = append(oc.Topics, ot)
	ocr := rc.roundTrip(oc, 3).(*kmsg.OffsetCommitResponse)
	if len(ocr.Topics) != 1 || len(ocr.Topics[0].Partitions) != 1 ||
		ocr.Topics[0].Partitions[0].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("OffsetCommit v1: %+v", ocr.Topics)
	}

	lo := kmsg.NewPtrListOffsetsRequest()
	lo.SetVersion(7) // above ListOffsets' 6 (a flexible version)
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "uv"
	lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	lo.Topics = append(lo.Topics, lt)
	lr := rc.roundTrip(lo, 4).(*kmsg.ListOffsetsResponse)
	if len(lr.Topics) != 1 || lr.Topics[0].Partitions[0].ErrorCode != kerr.UnsupportedVersion.Code {
		t.Fatalf("ListOffsets v7: %+v", lr.Topics)
	}

	for i, v := range []int16{0, 3} {
		av := kmsg.NewPtrApiVersionsRequest()
		av.SetVersion(v)
		sw, swv := "kafka-python", "2.0.2"
		av.ClientSoftwareName, av.ClientSoftwareVersion = sw, swv
		r := rc.roundTrip(av, int32(5+i)).(*kmsg.ApiVersionsResponse)
		if r.ErrorCode != 0 || len(r.ApiKeys) != len(handlers) {
			t.Fatalf("ApiVersions v%d: error %d, %d keys", v, r.ErrorCode, len(r.ApiKeys))
		}
	}
	// The acks=0 produce of an unsupported version wrote nothing.
	info, err := ts.env.Svc.Head(t.Context(), "/uv")
	if err != nil || info.NextOffset != 0 {
		t.Fatalf("stream /uv has %d records (%v), want 0", info.NextOffset, err)
	}
}

// legacyMessage is one magic-1 message set entry, as a pre-0.11 producer
// (kafka-python with api_version 0.10) writes it.
func legacyMessage(ts int64, key, value []byte) []byte {
	m := kmsg.MessageV1{Magic: 1, Timestamp: ts, Key: key, Value: value}
	b := m.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[12:], crc32.ChecksumIEEE(b[16:]))
	return b
}

// TestProduceBelowV3Refused: Produce v0–v2 (magic 0/1 message sets, what
// kafka-python sends when told api_version 0.10) are not advertised
// (ApiVersions says 3–12; Kafka 4.0 says 3–13: franz-go pinned to 0.10.2
// fails the records with its "broker too old") and a v2 request that comes
// anyway is answered UNSUPPORTED_VERSION with nothing written; a magic-1
// set in Produce v3+ (which must be magic 2) is
// UNSUPPORTED_FOR_MESSAGE_FORMAT.
func TestProduceBelowV3Refused(t *testing.T) {
	ts := startServer(t, Config{})
	ts.createTopic("legacy", 1)
	rc := ts.raw()
	av := rc.roundTrip(kmsg.NewPtrApiVersionsRequest(), 1).(*kmsg.ApiVersionsResponse)
	for _, k := range av.ApiKeys {
		if k.ApiKey == kmsg.Produce.Int16() && (k.MinVersion != 3 || k.MaxVersion != 12) {
			t.Fatalf("ApiVersions: Produce %d–%d, want 3–12", k.MinVersion, k.MaxVersion)
		}
	}
	now := time.Now().UnixMilli()
	set := append(legacyMessage(now, []byte("k"), []byte("v0")), legacyMessage(now+1, nil, []byte("v1"))...)
	req := produceRequest("legacy", -1, -1, -1, 0)
	req.Topics[0].Partitions[0].Records = set
	for v := int16(0); v <= 2; v++ {
		req.SetVersion(v)
		p := rc.roundTrip(req, 2+int32(v)).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
		if p.ErrorCode != kerr.UnsupportedVersion.Code {
			t.Fatalf("produce v%d of a magic-1 set: error %d, want UNSUPPORTED_VERSION", v, p.ErrorCode)
		}
	}
	req.SetVersion(3)
	if p := rc.roundTrip(req, 5).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; p.ErrorCode != kerr.UnsupportedForMessageFormat.Code {
		t.Fatalf("produce v3 of a magic-1 set: error %d, want UNSUPPORTED_FOR_MESSAGE_FORMAT", p.ErrorCode)
	}
	if info, err := ts.env.Svc.Head(t.Context(), "/legacy"); err != nil || info.NextOffset != 0 {
		t.Fatalf("stream /legacy has %d records (%v), want 0", info.NextOffset, err)
	}
}

// TestSASLHandshakeV0: after a SaslHandshake v0 (kafka-python 2.0.2 sends
// nothing else) the next frame is the raw PLAIN message; a good token is
// answered with an empty raw frame and the connection is authenticated, a
// bad one closes the connection.
func TestSASLHandshakeV0(t *testing.T) {
	const token = "pmq_test-token-for-handshake-v0"
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	file := "tokens:\n  - name: t\n    sha256: " + auth.HashToken(token) + "\n    scopes: [\"admin:/\"]\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	store, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, Config{Auth: store})
	for _, tc := range []struct {
		token string
		ok    bool
	}{{token, true}, {"pmq_wrong-token-for-handshake-v0", false}} {
		rc := ts.raw()
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.SetVersion(0)
		hs.Mechanism = "PLAIN"
		if r := rc.roundTrip(hs, 1).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
			t.Fatalf("handshake v0: error %d", r.ErrorCode)
		}
		msg := []byte("\x00user\x00" + tc.token)
		if _, err := rc.c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(msg))), msg...)); err != nil {
			t.Fatal(err)
		}
		_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var got [4]byte
		_, err := io.ReadFull(rc.r, got[:])
		if !tc.ok {
			if err == nil {
				t.Fatalf("wrong token answered %x, want the connection closed", got)
			}
			continue
		}
		if err != nil || got != [4]byte{} {
			t.Fatalf("good token: answer %x, %v; want an empty frame", got, err)
		}
		md := kmsg.NewPtrMetadataRequest()
		md.SetVersion(1)
		if r := rc.roundTrip(md, 2).(*kmsg.MetadataResponse); len(r.Brokers) != 1 {
			t.Fatalf("metadata after SASL: %+v", r.Brokers)
		}
	}
}

// TestUnsupportedVersionEveryKey: for every key we serve and every version
// kmsg knows outside our range, the UNSUPPORTED_VERSION answer to a
// (default) request encodes and decodes at that version.
func TestUnsupportedVersionEveryKey(t *testing.T) {
	for key, h := range handlers {
		req := kmsg.RequestForKey(key)
		for v := int16(0); v <= req.MaxVersion(); v++ {
			if v >= h.min && v <= h.max || key == kmsg.ApiVersions.Int16() {
				continue
			}
			r := kmsg.RequestForKey(key)
			r.SetVersion(v)
			if err := r.ReadFrom(r.AppendTo(nil)); err != nil {
				t.Fatalf("%s v%d: %v", kmsg.NameForKey(key), v, err)
			}
			resp := unsupportedVersionResponse(r)
			back := r.ResponseKind()
			back.SetVersion(v)
			if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
				t.Fatalf("%s v%d: response does not decode: %v", kmsg.NameForKey(key), v, err)
			}
		}
	}
}
