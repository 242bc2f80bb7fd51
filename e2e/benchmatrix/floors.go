package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Floors: what this machine allows any implementation, measured in the
// same run as PicoMQ's rows by bare programs doing only the work a node
// must do (relayfloor.go for the cold read, replfloor.go for replicated
// appends). They run as child processes of benchmatrix itself (its
// hidden subcommands), because PicoMQ's node is a process of its own
// and the floors must pay the same process boundaries.

// childEnv marks a benchmatrix (or its test binary) started as one of
// the floors' child processes: os.Args[1:] are then the child's
// subcommand and flags. The test binary has no subcommands of its own,
// so TestMain checks the variable, not the arguments.
const childEnv = "PICOMQ_BENCHMATRIX_CHILD"

// childCommands are the hidden subcommands.
var childCommands = map[string]func(args []string) error{
	"relay":      relayMain,
	"relay-many": relayManyMain,
	"replfloor":  replFloorMain,
}

// isChild reports whether args (os.Args[1:]) name a child subcommand.
func isChild(args []string) bool {
	if len(args) == 0 {
		return false
	}
	_, ok := childCommands[args[0]]
	return ok
}

// childMain runs a child subcommand and returns the exit status.
func childMain(args []string) int {
	if !isChild(args) {
		fmt.Fprintf(os.Stderr, "benchmatrix: not a child subcommand: %q\n", args)
		return 2
	}
	if err := childCommands[args[0]](args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "benchmatrix %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// startChild starts this executable as the child subcommand args and
// waits (up to a minute) for the line "listening ADDR" it prints once
// its listener is up; it returns the process and ADDR.
func startChild(name string, args ...string) (*proc, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	// A child outlives nothing: if the matrix dies without stopping it,
	// the kernel kills it (its servers have no other end).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	addrs := make(chan string, 1)
	p, err := startCmd(name, cmd, func(l string) {
		if a, ok := strings.CutPrefix(l, "listening "); ok {
			select {
			case addrs <- strings.TrimSpace(a):
			default:
			}
		}
	})
	if err != nil {
		return nil, "", err
	}
	select {
	case a := <-addrs:
		return p, a, nil
	case <-p.done:
		return nil, "", fmt.Errorf("%s exited:\n%s", name, p.tail())
	case <-time.After(time.Minute):
		p.stop()
		return nil, "", fmt.Errorf("%s did not listen within a minute:\n%s", name, p.tail())
	}
}

// announce prints the line startChild waits for.
func announce(addr string) {
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "listening %s\n", addr)
	_ = w.Flush()
}
