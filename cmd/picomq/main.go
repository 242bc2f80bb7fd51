// Command picomq is PicoMQ's one binary: `picomq serve` runs a node; the
// client subcommands (create, append, read, tail, ls, rm, describe) and
// the load generator (bench) are built on the Go SDK (client.go, bench.go,
// docs/cli.md, docs/benchmarks.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/PicoMQ/picomq/node"
)

const usage = `picomq — a tiered-storage log service

Usage:
  picomq serve [flags]    run a node (picomq serve -h lists the flags)
  picomq token new|hash|check   make tokens for --auth-tokens (docs/security.md)
  picomq restore-counters [flags]   after an etcd restore: raise the stream-ID counter (docs/operations.md)
  picomq bench [flags]    append load, ack latency and throughput (docs/benchmarks.md)
  picomq version          print the version

` + clientUsage + `
Docs: docs/configuration.md, docs/api.md, docs/cli.md
`

// version, commit and date are stamped by `make release` with -ldflags
// "-X main.version=… -X main.commit=… -X main.date=…".
var (
	version = "dev"
	commit  = "unknown"
	date    = "unknown"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "bench":
		return benchCmd(args[1:], processEnv(stdout, stderr))
	case "encode":
		return encodeCmd(args[1:], os.Stdin, stdout, stderr)
	case "token":
		return tokenCmd(args[1:], os.Stdin, stdout, stderr)
	case "restore-counters":
		return restoreCountersCmd(args[1:], stdout, stderr)
	case "version", "--version":
		fmt.Fprintf(stdout, "picomq %s (commit %s, built %s, %s/%s)\n", version, commit, date, runtime.GOOS, runtime.GOARCH)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		if _, ok := clientCommands[args[0]]; ok {
			return runClient(args[0], args[1:], processEnv(stdout, stderr))
		}
		fmt.Fprintf(stderr, "picomq: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// processEnv is the client subcommands' view of the process: its stdin,
// environment and terminal.
func processEnv(stdout, stderr io.Writer) env {
	return env{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, stderrTTY: isTerminal(os.Stderr)}
}

func serve(args []string, stderr io.Writer) int {
	cfg, err := node.ParseServeFlags(args, os.Getenv, stderr)
	if errors.Is(err, node.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "picomq serve: %v\n", err)
		return 2
	}
	log := node.NewLogger(cfg, os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	done := make(chan struct{})
	defer close(done)
	go exitAfterShutdownTimeout(ctx, done, cfg.ShutdownTimeout, stderr)
	if err := node.Run(ctx, cfg, log); err != nil {
		fmt.Fprintf(stderr, "picomq serve: %v\n", err)
		var se *node.SettingError
		if errors.As(err, &se) {
			return 2
		}
		return 1
	}
	return 0
}

// exitAfterShutdownTimeout bounds a shutdown whatever state the node is in
// (starting, serving, draining, stuck on an unreachable dependency): once
// the signal came, the process is gone within --shutdown-timeout.
// Everything acknowledged is already in the fsynced WAL, so a hard exit
// loses nothing acknowledged.
func exitAfterShutdownTimeout(ctx context.Context, done <-chan struct{}, timeout time.Duration, stderr io.Writer) {
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		fmt.Fprintf(stderr, "picomq serve: shutdown did not finish within --shutdown-timeout %s; exiting\n", timeout)
		os.Exit(1)
	}
}
