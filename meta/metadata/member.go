package metadata

import (
	"encoding/json"
	"time"
)

// Member is a node's entry in the membership list. It lives under a lease,
// so it disappears by itself when the node stops renewing it.
type Member struct {
	NodeID       string `json:"nodeId"`
	AdvertiseURL string `json:"advertiseUrl"`
	KafkaAddr    string `json:"kafkaAddr,omitempty"`
	// Protocol is the node's HTTP stream protocol (pico or
	// durable-streams); empty in records of nodes that predate it.
	Protocol string `json:"protocol,omitempty"`
	// Zone is the node's failure-domain label (--zone); replicated
	// streams put their copies in other zones first.
	Zone string `json:"zone,omitempty"`
	// TxnVersion is the highest Kafka transaction.version the node's
	// build serves (2: KIP-890 part 2); absent (0) in records of builds
	// before it. The Kafka frontend finalizes a level only once every
	// live member serves it, so a rolling upgrade never hands a client a
	// protocol an old node would refuse.
	TxnVersion int       `json:"txnVersion,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
}

// DecodeMember reads a membership value (JSON; the names are pinned by
// testdata/formats/member.json).
func DecodeMember(value []byte) (Member, error) {
	var m Member
	err := json.Unmarshal(value, &m)
	return m, err
}

// Lease is a node's membership session as the code that only checks it
// sees it: the stream service asks whether it may still acknowledge
// writes and passes it back to the registry's fenced writes, without
// linking etcd's client. meta.Session is the one implementation; the
// registry refuses a Lease it did not create (ErrInvalid).
type Lease interface {
	// Valid reports whether the lease was renewed recently enough that
	// it cannot have expired: writes may be acknowledged.
	Valid() bool
	// Lost reports whether etcd told the node the lease is gone.
	Lost() bool
}
