// Package tool finds the helm and promtool binaries the deploy tests run:
// $PICOMQ_HELM_BIN / $PICOMQ_PROMTOOL_BIN (make k8s-test sets them), else
// the tool cache that deploy/k8s-tools.sh builds.
package tool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Path returns the binary of name ("helm" or "promtool"). Missing, the
// test fails under CI (whose .ci/run builds it) and is skipped elsewhere.
func Path(t testing.TB, name string) string {
	t.Helper()
	env := "PICOMQ_" + strings.ToUpper(name) + "_BIN"
	p := os.Getenv(env)
	if p == "" {
		script, err := filepath.Abs("../../k8s-tools.sh")
		if err == nil {
			if out, err := exec.Command(script, name).Output(); err == nil {
				p = strings.TrimSpace(string(out))
			}
		}
	}
	if fi, err := os.Stat(p); p == "" || err != nil || fi.Mode()&0o111 == 0 {
		msg := name + " not built: run deploy/k8s-tools.sh build (or set " + env + ")"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}
