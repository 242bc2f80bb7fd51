package testproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// EtcdPkg is the import path of the etcd daemon the tests run: etcd 3.6
// (the version go.mod pins) built from this module, a separate process a
// test can stop and start like an operator would.
const EtcdPkg = "github.com/PicoMQ/picomq/e2e/cmd/etcd"

var etcdBuild struct {
	once sync.Once
	bin  string
	err  error
}

// EtcdBinary returns $PICOMQ_ETCD_BIN, or else builds EtcdPkg into dir;
// either once per test binary.
func EtcdBinary(dir string) (string, error) {
	etcdBuild.once.Do(func() {
		if etcdBuild.bin = os.Getenv("PICOMQ_ETCD_BIN"); etcdBuild.bin != "" {
			return
		}
		etcdBuild.bin = filepath.Join(dir, "etcd")
		etcdBuild.err = Build(etcdBuild.bin, EtcdPkg)
	})
	return etcdBuild.bin, etcdBuild.err
}

// Etcd is a one-member etcd on two loopback ports. Start may be called
// again after the process has gone: same ports, same data.
type Etcd struct {
	Bin        string
	Name       string // member name
	DataDir    string // etcd creates it with mode 0700
	ClientAddr string
	PeerAddr   string
	// DieWithParent has the kernel kill etcd when the test binary dies
	// (Pdeathsig), so that a crashed test leaves no daemon behind.
	DieWithParent bool
	*Proc         // the running (or last) process; nil before Start
}

// ClientURL is the address clients (and --etcd-endpoints) use.
func (e *Etcd) ClientURL() string { return "http://" + e.ClientAddr }

// Start runs etcd and waits until /health reports healthy; an etcd that
// does not get there is killed.
func (e *Etcd) Start(within time.Duration) error {
	peer := "http://" + e.PeerAddr
	cmd := exec.Command(e.Bin,
		"--name", e.Name,
		"--data-dir", e.DataDir,
		"--listen-client-urls", e.ClientURL(), "--advertise-client-urls", e.ClientURL(),
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", e.Name+"="+peer,
		// One member: fast timing only shortens the first election.
		"--heartbeat-interval", "10", "--election-timeout", "100",
		"--log-level", "warn")
	if e.DieWithParent {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	var logs *SyncBuffer
	if e.Proc != nil {
		logs = e.Logs // one log across restarts
	}
	p, err := Start(cmd, logs)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	e.Proc = p
	err = WaitFor(func() error {
		if !e.Healthy() {
			return errors.New("/health is not healthy")
		}
		return nil
	}, p.Exited, within)
	if err != nil {
		exit := p.exitErr()
		p.Kill()
		return fmt.Errorf("etcd: %v (exit: %v)\n%s", err, exit, p.Logs.String())
	}
	return nil
}

// Healthy reports whether etcd's /health endpoint says so (it needs a
// leader and a working store, not just an open port).
func (e *Etcd) Healthy() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(e.ClientURL() + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}
