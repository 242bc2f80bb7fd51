module github.com/PicoMQ/picomq/client/go

go 1.26.0

require (
	github.com/PicoMQ/picomq/internal/testproc v0.0.0
	github.com/PicoMQ/picomq/sdk v0.0.0
	golang.org/x/net v0.61.0
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	golang.org/x/text v0.43.0 // indirect
)

// The modules of this repository are versioned together; in the tree the
// client builds against the wire vocabulary and test harness beside it.
replace (
	github.com/PicoMQ/picomq/internal/testproc => ../../internal/testproc
	github.com/PicoMQ/picomq/sdk => ../../sdk
)
