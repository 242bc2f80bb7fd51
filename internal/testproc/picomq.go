package testproc

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Picomqs is a picomq binary in a temporary directory that also holds the
// data directories of the `picomq serve` children started from it: the
// harness of the black-box tests of the SDK and of the CLI.
type Picomqs struct {
	Bin string // PicomqBinary
	Dir string // removed when the tests are done
}

// PicomqMain is what a TestMain of such tests calls: it makes the
// temporary directory (named after what, e.g. "sdk"), builds picomq there
// (PicomqBinary), calls run (which runs the tests) and exits with run's
// code once the directory is gone.
func PicomqMain(what string, run func(*Picomqs) int) {
	os.Exit(picomqMain(what, run))
}

func picomqMain(what string, run func(*Picomqs) int) int {
	dir, err := os.MkdirTemp("", "picomq-"+what+"-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := PicomqBinary(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: building picomq: %v\n", what, err)
		return 1
	}
	return run(&Picomqs{Bin: bin, Dir: dir})
}

// Serve starts `picomq serve` with a fresh data directory, its HTTP
// listener on httpAddr and the flags args, and waits up to within until
// /readyz answers 200; a server that does not get there is killed. The
// server dies with the test binary (Pdeathsig): a test binary that exits
// at once (an example's log.Fatal) leaves no server holding its port.
func (p *Picomqs) Serve(httpAddr string, within time.Duration, args ...string) (*Proc, error) {
	dir, err := os.MkdirTemp(p.Dir, "data")
	if err != nil {
		return nil, err
	}
	args = append([]string{"serve", "--data-dir", dir, "--http-addr", httpAddr}, args...)
	cmd := exec.Command(p.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	proc, err := Start(cmd, nil)
	if err != nil {
		return nil, err
	}
	if err := WaitReady("http://"+httpAddr+"/readyz", proc.Exited, within); err != nil {
		proc.Kill()
		return nil, fmt.Errorf("picomq %v: %v (exit: %v)\n%s", args, err, proc.ExitErr, proc.Logs.String())
	}
	return proc, nil
}
