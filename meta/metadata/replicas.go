package metadata

// ReplicaSet is where a `replicated` stream's copies live and which of
// them are in sync (docs/durability.md, "replicated"). The owner writes it
// (conditioned on its live session and the key's revision) whenever it
// changes a follower or the in-sync set, and before it acknowledges an
// append without a follower that fell behind; a node taking the stream
// over must be one of InSync, because every acknowledged record is on
// every member of InSync.
type ReplicaSet struct {
	// Epoch and Owner: the ownership the set was written under.
	Epoch int64  `json:"epoch"`
	Owner string `json:"owner"`
	// Followers are the nodes the owner ships the stream's WAL entries
	// to; InSync is the subset that holds every acknowledged record.
	Followers []string `json:"followers,omitempty"`
	InSync    []string `json:"inSync,omitempty"`
	// Rev is the key's etcd mod revision (0: no key), for the next write.
	Rev int64 `json:"-"`
}
