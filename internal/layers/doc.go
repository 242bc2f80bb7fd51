// Package layers holds no code: its test enforces PicoMQ's import rules
// (docs/architecture.md) on every package of the module, as part of a plain
// `go test ./...`.
package layers
