// Package txn is PicoMQ's Kafka transaction coordinator: the state of each
// transactional.id (producer id, epoch, partitions and groups of the open
// transaction), its transitions (InitProducerId, AddPartitionsToTxn,
// AddOffsetsToTxn, EndTxn, the transaction timeout), and the durable
// record of it. The markers that end a transaction on each partition are
// written through the Markers port (the Kafka frontend appends them to the
// partitions' streams as control batches). docs/kafka.md, "Transactions".
package txn

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// State is a transaction's state, with Kafka's names.
type State uint8

const (
	Empty State = iota
	Ongoing
	PrepareCommit
	PrepareAbort
	CompleteCommit
	CompleteAbort
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", s)
}

// ParseState reads a state name (ListTransactions' filter).
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if strings.EqualFold(n, name) {
			return State(i), true
		}
	}
	return 0, false
}

// preparing reports whether markers are being written: the outcome is
// decided and durable, the transaction not yet complete.
func (s State) preparing() bool { return s == PrepareCommit || s == PrepareAbort }

// Partition is one topic partition of a transaction.
type Partition struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
}

// Meta is everything the coordinator keeps of one transactional id: one
// record of it is appended to the id's state stream at every transition,
// and the latest record is the state.
type Meta struct {
	ID         string      `json:"id"`
	ProducerID int64       `json:"pid"`
	Epoch      int16       `json:"epoch"`
	TimeoutMs  int32       `json:"timeoutMs"`
	State      State       `json:"state"`
	Partitions []Partition `json:"partitions,omitempty"`
	// Reserved are partitions recorded durably ahead of their
	// AddPartitionsToTxn (the other partitions of a topic the
	// transaction added, Coordinator.AddPartitions), so adding them later
	// costs no write. Only a coordinator that loads the state from the
	// store treats them as added (it cannot tell which of them were).
	Reserved []Partition `json:"reserved,omitempty"`
	Groups   []string    `json:"groups,omitempty"`
	// StartMs is when the open transaction began (its first
	// AddPartitionsToTxn/AddOffsetsToTxn); UpdateMs the last transition.
	StartMs  int64 `json:"startMs,omitempty"`
	UpdateMs int64 `json:"updateMs"`
	// Bumped says the last EndTxn was a transaction.version 2 end (KIP-890
	// part 2), which bumped the epoch: PrevProducerID/PrevEpoch are the
	// producer id and epoch the ending transaction ran under, so a retry
	// of that EndTxn (which carries them) is recognised and answered with
	// the current ones. Cleared when the next transaction begins.
	Bumped         bool  `json:"bumped,omitempty"`
	PrevProducerID int64 `json:"prevPid,omitempty"`
	PrevEpoch      int16 `json:"prevEpoch,omitempty"`
	// NextProducerID is set on a Prepare record whose bump exhausted the
	// epochs: once the markers (at the last epoch) are written the id
	// continues with this producer id at epoch 0.
	NextProducerID int64 `json:"nextPid,omitempty"`
}

func (m *Meta) encode() []byte {
	b, _ := json.Marshal(m)
	return b
}

func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("txn: state record: %w", err)
	}
	if m.ID == "" || m.State > CompleteAbort || m.ProducerID < 0 {
		return Meta{}, fmt.Errorf("txn: state record: bad id, state or producer id in %q", b)
	}
	return m, nil
}

// addPartitions adds ps to the open transaction, keeping the list sorted and
// unique; it reports whether anything was new.
func (m *Meta) addPartitions(ps []Partition) bool {
	added := false
	for _, p := range ps {
		i, found := slices.BinarySearchFunc(m.Partitions, p, comparePartitions)
		if !found {
			m.Partitions = slices.Insert(m.Partitions, i, p)
			added = true
		}
	}
	return added
}

// reserves reports whether every partition of ps is reserved.
func (m *Meta) reserves(ps []Partition) bool {
	for _, p := range ps {
		if _, found := slices.BinarySearchFunc(m.Reserved, p, comparePartitions); !found {
			return false
		}
	}
	return true
}

// reserve adds ps to the reserved partitions (sorted, unique).
func (m *Meta) reserve(ps []Partition) {
	for _, p := range ps {
		i, found := slices.BinarySearchFunc(m.Reserved, p, comparePartitions)
		if !found {
			m.Reserved = slices.Insert(m.Reserved, i, p)
		}
	}
}

// loaded is m as a coordinator that loads it from the store must see it:
// any reserved partition may have been added since the record was
// written, so all of them are.
func (m Meta) loaded() Meta {
	if len(m.Reserved) > 0 {
		m.Partitions = append([]Partition(nil), m.Partitions...)
		m.addPartitions(m.Reserved)
		m.Reserved = nil
	}
	return m
}

func (m *Meta) addGroup(g string) bool {
	if slices.Contains(m.Groups, g) {
		return false
	}
	m.Groups = append(m.Groups, g)
	return true
}

func comparePartitions(a, b Partition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}
