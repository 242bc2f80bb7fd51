// Package meta is PicoMQ's metadata layer on etcd: it dials etcd clusters
// and keeps the stream registry. The embedded etcd server of the
// zero-config single node (and of tests) is package meta/embedded, so that
// importing meta does not link etcd's server; the records it stores, their
// encodings and its sentinel errors are package meta/metadata, so that code
// which only reads records (the stream service, the frontends) does not
// link etcd's client either.
//
// etcd is the only shared state between nodes, so everything here is written
// with conditional transactions (compare-and-swap on revisions) rather than
// read-modify-write: two nodes racing on the same record can never both win.
// Nothing in this package knows which client protocol a stream is served
// through.
//
// # Key layout
//
// Every key lives under the registry prefix P (default "/picomq/"; see
// [NewRegistry]), so several PicoMQ clusters or test cases can share one etcd:
//
//	P + "streams/" + name     [metadata.Stream] record, one per live stream.
//	                          The name keeps its leading "/", so the stream
//	                          "/orders/1042" is stored at
//	                          "/picomq/streams//orders/1042". Keeping the name
//	                          verbatim after a fixed "streams/" separator means
//	                          a name can never escape into another key space,
//	                          and a key range over P+"streams/"+prefix is
//	                          exactly "all names starting with prefix".
//	P + "scram/" + mech + "/" + user
//	                          JSON [ScramCredential] of a Kafka SCRAM user
//	                          (salt, iterations, StoredKey, ServerKey;
//	                          never a password), scram.go.
//	P + "counters/stream-id"  decimal, the highest stream ID handed out to
//	                          any registry's block of IDs (idblock.go). It
//	                          only ever grows and must never be deleted:
//	                          stream IDs name object-store paths, so reusing
//	                          one would alias a deleted stream's data.
//
// Cluster membership (node leases), ownership transfers, topic aliases and
// segment watermarks will be added beside these keys under the same prefix;
// the [metadata.Stream] record already carries the owner and fencing epoch
// they need.
package meta
