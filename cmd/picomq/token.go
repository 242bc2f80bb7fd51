package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/PicoMQ/picomq/auth"
)

const tokenUsage = `Usage:
  picomq token new --name NAME --scope LEVEL:PREFIX|metrics [--scope …] [--rate N --burst N]
      print a new random token (give it to the client) and the token-file
      entry holding only its hash (append it to the --auth-tokens file)
  picomq token hash
      read a token on stdin, print its SHA-256 as the token file stores it
  picomq token check FILE
      parse a token file and report how many tokens it holds
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// tokenCmd manages tokens for --auth-tokens (docs/security.md).
func tokenCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return 2
	}
	switch args[0] {
	case "new":
		fs := flag.NewFlagSet("picomq token new", flag.ContinueOnError)
		fs.SetOutput(stderr)
		name := fs.String("name", "", "token name (shown in logs, never the secret)")
		rate := fs.Float64("rate", 0, "requests per second (0 = unlimited)")
		burst := fs.Int("burst", 0, "burst of the rate limit (default: the rate)")
		var scopes multiFlag
		fs.Var(&scopes, "scope", "LEVEL:PREFIX (level read, write or admin), or metrics (scrape-only: GET /metrics); repeatable")
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		if *name == "" || len(scopes) == 0 {
			fmt.Fprint(stderr, "picomq token new: --name and at least one --scope are required\n\n"+tokenUsage)
			return 2
		}
		for _, s := range scopes {
			if _, err := auth.ParseScope(s); err != nil {
				fmt.Fprintf(stderr, "picomq token new: %v\n", err)
				return 2
			}
		}
		secret := make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			fmt.Fprintf(stderr, "picomq token new: %v\n", err)
			return 1
		}
		token := "pmq_" + base64.RawURLEncoding.EncodeToString(secret)
		fmt.Fprintf(stdout, "# token (give it to the client; it is not stored anywhere):\n# %s\n", token)
		fmt.Fprintf(stdout, "  - name: %q\n    sha256: %s\n    scopes: [%s]\n", *name, auth.HashToken(token), quoteAll(scopes))
		if *rate > 0 {
			fmt.Fprintf(stdout, "    rate: %g\n", *rate)
			if *burst > 0 {
				fmt.Fprintf(stdout, "    burst: %d\n", *burst)
			}
		}
		return 0
	case "hash":
		line, err := bufio.NewReader(stdin).ReadString('\n')
		line = strings.TrimSpace(line)
		if line == "" {
			fmt.Fprintf(stderr, "picomq token hash: no token on stdin (%v)\n", err)
			return 2
		}
		fmt.Fprintln(stdout, auth.HashToken(line))
		return 0
	case "check":
		if len(args) != 2 {
			fmt.Fprint(stderr, tokenUsage)
			return 2
		}
		s, err := auth.Load(args[1])
		if err != nil {
			fmt.Fprintf(stderr, "picomq token check: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: %d tokens\n", args[1], s.Len())
		return 0
	default:
		fmt.Fprintf(stderr, "picomq token: unknown subcommand %q\n\n%s", args[0], tokenUsage)
		return 2
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
