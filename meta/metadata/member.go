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
	Zone      string    `json:"zone,omitempty"`
	StartedAt time.Time `json:"startedAt"`
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
