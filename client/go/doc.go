// Package picomq is the Go client of PicoMQ, a tiered-storage log service in
// which a stream is a URL path holding an append-only log of records.
//
// It speaks both of PicoMQ's HTTP protocols with one API: Pico, the native
// protocol (NewPico, docs/api.md), and Durable Streams (NewDurableStreams,
// docs/durable-streams.md). Constructors do no network I/O; a Client is a
// set of options around an http.Client, safe for concurrent use.
//
//	client, err := picomq.NewPico("http://127.0.0.1:4437")
//	stream := client.Stream("/orders/1042")
//	_, err = stream.Create(ctx, "application/json", 0)
//	ack, err := stream.Append(ctx, picomq.AppendRecord{Body: []byte(`{"item":"widget"}`)})
//	page, err := stream.Read(ctx, client.Beginning(), picomq.ReadOptions{})
//
// # Positions
//
// A position names a place in a stream and is an opaque string: always
// continue from the Next a call returned. Client.Beginning is the first
// record ("0" on Pico, "-1" on Durable Streams). PositionNow ("now") is the
// stream's end at the time of the call — a Durable Streams sentinel that the
// SDK emulates on Pico with a HEAD request. On PicoMQ both protocols'
// positions name record offsets (the offsets Kafka consumers see), so
// Client.PositionAt and Client.OffsetOf convert between them for seeking.
//
// # Reading
//
// Stream.Read reads one page. Stream.Records iterates page by page and, with
// RecordsOptions.Live, long-polls for new records once caught up; the
// context given to Records.Next interrupts a pending poll. Stream.Subscribe
// streams records over server-sent events, reconnecting from the last
// delivered position (Last-Event-ID on Pico) when the server ends the
// connection or the network fails, so nothing is lost or repeated.
//
// # Writing
//
// Stream.Append writes records as one atomic batch and is never retried
// automatically: an append whose response was lost may or may not have been
// written. Stream.NewProducer returns a Producer that batches records,
// bounds the bytes it buffers, numbers its batches with the server's
// idempotent-producer headers and retries them safely: a retried batch the
// server already wrote is acknowledged, not written again. Send returns a
// PendingAck; SendDurable waits for the record's position. A batch that fails
// for good fails the producer; recover with a new Producer (same ID, higher
// Epoch).
//
// # Redirects, tokens and retries
//
// In a cluster a node answers 307 with the owning node's absolute URL. The
// SDK follows redirects itself, re-sending the method, the body and the
// token (WithToken) to every hop, and remembers each stream's owner so later
// requests go there directly. WithRetryPolicy retries read-shaped requests
// (reads, HEAD, listings) on network errors and 429/502/503/504, honouring
// Retry-After; writes are never retried except by a Producer. Every call
// takes a context, which interrupts network calls and retry delays alike.
//
// # Transport
//
// Unless WithHTTPClient or WithStdTransport is given, appends, creates,
// trims, deletes and HEADs to an http:// URL that no proxy applies to go
// through a lean HTTP/1.1 transport that runs each request in the calling
// goroutine (one write per request, net/http's response semantics): it
// cut the client's CPU per append by a quarter to a third against
// net/http's Transport (docs/benchmarks.md). Reads, long-polls,
// subscriptions and anything over https or a proxy use net/http. It keeps
// up to 64 idle keep-alive connections per host for 90 s, returns a
// connection to the pool only after a response body was read to its end,
// and aborts blocked I/O when the call's context ends. An idle connection
// is checked (without blocking) before reuse; if a request on a reused
// connection still fails before any response byte, it is resent once on a
// new connection only when nothing of it was written or it is replayable
// (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key or X-Idempotency-Key
// header) — net/http's rule — so the transport never sends an append
// twice. Such requests skip http.Client.Do, which has nothing to do for
// the SDK's own client; their errors read as Do's would. Appends to a
// stream's known URL skip the http.Request as well: their bytes are
// rendered from what the stream keeps about that URL (the same request,
// as the server reads it). docs/sdk-go.md has the details.
//
// # Errors
//
// Error responses are *ClientError values carrying the HTTP status, the
// stable error code and the message; IsKind(err, KindNotFound) and friends
// test them without status arithmetic. Operations a protocol cannot express
// — listing, trimming, retention, record keys and headers on Durable
// Streams; closing a stream or TTLs on Pico — fail before anything is sent
// with an *UnsupportedError (IsKind(err, KindUnsupported), errors.Is(err,
// ErrUnsupported)).
//
// # Durable Streams specifics
//
// A Durable Streams record is a value. On application/json streams every
// record is one JSON value (the SDK wraps appends in an array, so a record
// that is itself an array stays one record); on other streams the protocol
// keeps no record boundaries, so a page is read as one record holding the
// page's bytes, and a producer batch is written as one body.
//
// The SDK imports nothing from the server but the shared wire vocabulary
// (sdk/wire) and the Pico record codec (sdk/wire/codec). docs/sdk-go.md is
// the guide.
package picomq
