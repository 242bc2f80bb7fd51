package testproc

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Proc is a started child process: its output goes to Logs, and Exited is
// closed once it has exited (ExitErr is then its Wait error).
type Proc struct {
	Cmd     *exec.Cmd
	Logs    *SyncBuffer
	Exited  chan struct{}
	ExitErr error
}

// Start starts cmd with its stdout and stderr in logs (a new buffer if
// nil) and watches for its exit. The caller sets cmd's environment and
// SysProcAttr beforehand.
func Start(cmd *exec.Cmd, logs *SyncBuffer) (*Proc, error) {
	if logs == nil {
		logs = &SyncBuffer{}
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, Logs: logs, Exited: make(chan struct{})}
	go func() {
		p.ExitErr = cmd.Wait()
		close(p.Exited)
	}()
	return p, nil
}

// exitErr is ExitErr once the process has exited, else nil.
func (p *Proc) exitErr() error {
	select {
	case <-p.Exited:
		return p.ExitErr
	default:
		return nil
	}
}

// Kill sends SIGKILL and waits until the process is gone; it does nothing
// to a process that has already exited.
func (p *Proc) Kill() {
	select {
	case <-p.Exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Exited
}

// Stop sends SIGTERM and waits for the exit; after within it kills the
// process and says so.
func (p *Proc) Stop(within time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
		return nil
	case <-time.After(within):
		p.Kill()
		return fmt.Errorf("no exit within %v of SIGTERM", within)
	}
}

// WaitFor calls ready every 20ms until it returns nil, the process exits
// (exited is closed; nil means never), or within has passed; the error
// then carries ready's last answer.
func WaitFor(ready func() error, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-exited:
			return errors.New("exited during start")
		default:
		}
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last: %v)", within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
