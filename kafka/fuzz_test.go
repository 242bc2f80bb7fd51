package kafka

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/PicoMQ/picomq/record"
)

// frameOf is a request as decodeRequest sees it (after the size prefix).
func frameOf(req kmsg.Request, corr int32) []byte {
	return appendFrame(nil, req, corr, "fuz")
}

// appendFrame appends req, with correlation id corr and client id
// clientID, as decodeRequest sees it (after the size prefix).
func appendFrame(b []byte, req kmsg.Request, corr int32, clientID string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	return req.AppendTo(b)
}

// seedRequests are well-formed requests of the versions clients send.
func seedRequests() [][]byte {
	var out [][]byte
	av := kmsg.NewPtrApiVersionsRequest()
	for _, v := range []int16{0, 3, 4} {
		av.SetVersion(v)
		out = append(out, frameOf(av, 1))
	}
	md := kmsg.NewPtrMetadataRequest()
	t := "topic"
	md.Topics = []kmsg.MetadataRequestTopic{{Topic: &t}}
	for _, v := range []int16{0, 4, 9, 12} {
		md.SetVersion(v)
		out = append(out, frameOf(md, 2))
	}
	batch := record.AppendBatch(nil, record.BatchOptions{Timestamp: 1, ProducerID: 7, ProducerEpoch: 0, BaseSequence: 0},
		[]record.Record{{Key: []byte("k"), Value: []byte("v"), Headers: []record.Header{{Key: "h", Value: []byte("x")}}}})
	pr := kmsg.NewPtrProduceRequest()
	pr.Acks = -1
	pr.Topics = []kmsg.ProduceRequestTopic{{Topic: t, Partitions: []kmsg.ProduceRequestTopicPartition{{Records: batch}}}}
	for _, v := range []int16{3, 7, 9, 11, 12} {
		pr.SetVersion(v)
		out = append(out, frameOf(pr, 3))
	}
	// KIP-890 part 2: the batched AddPartitionsToTxn nodes send each
	// other, and EndTxn v5.
	ap := kmsg.NewPtrAddPartitionsToTxnRequest()
	ap.Transactions = []kmsg.AddPartitionsToTxnRequestTransaction{{TransactionalID: "tx", ProducerID: 7, ProducerEpoch: 2,
		Topics: []kmsg.AddPartitionsToTxnRequestTransactionTopic{{Topic: t, Partitions: []int32{0, 3}}}}}
	for _, v := range []int16{4, 5} {
		ap.SetVersion(v)
		out = append(out, frameOf(ap, 9))
	}
	et := kmsg.NewPtrEndTxnRequest()
	et.SetVersion(5)
	et.TransactionalID, et.ProducerID, et.ProducerEpoch, et.Commit = "tx", 7, 2, true
	out = append(out, frameOf(et, 10))
	fr := kmsg.NewPtrFetchRequest()
	fr.Topics = []kmsg.FetchRequestTopic{{Topic: t, Partitions: []kmsg.FetchRequestTopicPartition{{FetchOffset: 5, PartitionMaxBytes: 1 << 20}}}}
	for _, v := range []int16{4, 11, 12} {
		fr.SetVersion(v)
		out = append(out, frameOf(fr, 4))
	}
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.SetVersion(7)
	ct.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: t, NumPartitions: 3, ReplicationFactor: 1}}
	out = append(out, frameOf(ct, 5))
	sa := kmsg.NewPtrSASLAuthenticateRequest()
	sa.SetVersion(2)
	sa.SASLAuthBytes = []byte("\x00user\x00token")
	out = append(out, frameOf(sa, 6))
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.SetVersion(1)
	re, inst, assignor := ".*orders.*", "i1", "uniform"
	hb.Group, hb.MemberID, hb.MemberEpoch, hb.InstanceID, hb.RebalanceTimeoutMillis = "g", "m", 3, &inst, 60000
	hb.SubscribedTopicRegex, hb.ServerAssignor = &re, &assignor
	hb.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{{TopicID: [16]byte{1}, Partitions: []int32{0, 2}}}
	out = append(out, frameOf(hb, 7))
	cd := kmsg.NewPtrConsumerGroupDescribeRequest()
	cd.SetVersion(1)
	cd.Groups = []string{"g", "h"}
	out = append(out, frameOf(cd, 8))
	return out
}

// FuzzDecodeRequest: any bytes after a frame's size prefix either decode
// or give an error; nothing panics, and a decoded request re-encodes. The
// SASL token parser gets the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range seedRequests() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		r, err := decodeRequest(frame)
		if err == nil && r.req != nil {
			again := frameOf(r.req, r.corr)
			if len(again) == 0 {
				t.Fatal("re-encoding gave nothing")
			}
		}
		_, _ = saslToken(mechPlain, frame)
		_, _ = saslToken(mechOAuthBearer, frame)
	})
}

// TestSeedRequestsDecode: the seeds are what they claim to be, so the fuzz
// corpus starts from valid requests.
func TestSeedRequestsDecode(t *testing.T) {
	for i, s := range seedRequests() {
		r, err := decodeRequest(s)
		if err != nil || r.req == nil {
			t.Fatalf("seed %d: %v", i, err)
		}
		if again := frameOf(r.req, r.corr); !bytes.Equal(again[10:], s[10:]) {
			t.Fatalf("seed %d does not round-trip", i)
		}
	}
}
