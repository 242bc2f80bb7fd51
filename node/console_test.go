package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConsoleServedWithoutData (issue 35): with auth on, the console's
// shell and assets are served to anyone, with a strict CSP, on both
// protocols' nodes, while the data routes it calls still need a token;
// paths beside the console's prefix are not opened by it.
func TestConsoleServedWithoutData(t *testing.T) {
	for _, protocol := range []string{ProtocolPico, ProtocolDurableStreams} {
		t.Run(protocol, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n := startTestNode(t, ctx, t.TempDir(), nil, "--protocol", protocol, "--auth-tokens", writeTokenFile(t, "pmq_console_admin"))
			shutdownAtEnd(t, n)
			client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			do := func(method, path string) (*http.Response, string) {
				req, _ := http.NewRequest(method, "http://"+n.Addr()+path, nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				return resp, string(b)
			}
			for _, c := range []struct {
				method, path string
				want         int
				body         string
			}{
				{"GET", "/_console/", 200, `src="/_console/assets/app.js"`},
				{"GET", "/_console/streams/orders/eu", 200, `src="/_console/assets/app.js"`}, // deep link: the shell
				{"GET", "/_console/assets/app.js", 200, "import"},
				{"GET", "/_console/assets/style.css", 200, "body"},
				{"GET", "/_console", 301, ""},
				{"GET", "/_console/assets/missing.js", 404, ""},
				{"POST", "/_console/", 405, ""},
				{"GET", "/_consolex", 401, ""},
				{"GET", "/_streams", 401, ""},
				{"GET", "/_sys/cluster", 401, ""},
				{"GET", "/_sys/groups", 401, ""},
				{"GET", "/_sys/node", 401, ""},
				{"GET", "/_sys/follow/orders/eu", 401, ""},
			} {
				resp, body := do(c.method, c.path)
				if resp.StatusCode != c.want || !strings.Contains(body, c.body) {
					t.Errorf("%s %s: %d %.80q, want %d with %q", c.method, c.path, resp.StatusCode, body, c.want, c.body)
				}
				if resp.StatusCode == 200 {
					csp := resp.Header.Get("Content-Security-Policy")
					if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
						t.Errorf("%s: CSP %q", c.path, csp)
					}
				}
			}
		})
	}
}
