package metadata

import (
	"encoding/json"
	"time"

	"github.com/PicoMQ/picomq/tiering/extent"
)

// Manifest records one object in object storage that holds stream data: which
// streams it holds, which offsets, and where in the object. A node commits
// one manifest per flush (not per stream, not per append), so etcd writes do
// not grow with the number of streams or appends. Compaction replaces many
// manifests by one in a single transaction.
type Manifest struct {
	// Key is the manifest's etcd key (set by Manifests; ignored on commit).
	Key string `json:"-"`
	// Rev is the manifest's etcd mod revision (set by Manifests; a
	// SwapManifests condition).
	Rev       int64            `json:"-"`
	Node      string           `json:"node"`
	Seq       uint64           `json:"seq"`
	Object    string           `json:"object"`
	Size      int64            `json:"size"`
	Level     int              `json:"level"`
	CreatedAt time.Time        `json:"createdAt"`
	Streams   []ManifestStream `json:"streams"`
}

// ManifestStream is one stream's range inside a manifest's object.
type ManifestStream struct {
	// Extent is the stream's range in the object (its JSON fields are
	// inlined: "id", "first", "next", "off", "len", ...).
	extent.Extent
	// State is the stream service's snapshot of the stream as of Next
	// (producer state, closure, writer sequence): once the WAL that held
	// those facts is truncated, this is where they are rebuilt from. Opaque
	// to meta.
	State json.RawMessage `json:"state,omitempty"`
}

// DecodeManifest reads a manifest value (JSON; the names are pinned by
// testdata/formats/manifest.json).
func DecodeManifest(value []byte) (Manifest, error) {
	var m Manifest
	err := json.Unmarshal(value, &m)
	return m, err
}
