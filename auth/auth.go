// Package auth checks bearer tokens against a token file and says what a
// token may do. It is shared by every listener that authenticates clients
// (HTTP bearer tokens, Kafka SASL PLAIN and OAUTHBEARER), so a token means
// the same thing on each; it knows nothing about HTTP or Kafka.
//
// The token file stores only SHA-256 hashes of tokens, never the tokens
// themselves (docs/security.md documents the format). A token is a random
// secret with at least 128 bits of entropy, so a fast unsalted hash is
// enough: there is nothing to brute-force that a salt would protect.
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"
)

// Level is what a scope permits on the streams under its prefix. Admin
// includes write and read; write does not include read, so a producer
// token cannot read back what others wrote. Metrics is not a level on
// streams: a token whose only scope is "metrics" may scrape /metrics and
// nothing else (a Prometheus server's credential, see ScrapeOnly).
type Level uint8

// Levels, weakest first.
const (
	Read Level = 1 << iota
	Write
	Admin
	Metrics
)

// ScopeMetrics is the scope string of a scrape-only token.
const ScopeMetrics = "metrics"

func (l Level) String() string {
	switch l {
	case Read:
		return "read"
	case Write:
		return "write"
	case Admin:
		return "admin"
	case Metrics:
		return ScopeMetrics
	}
	return fmt.Sprintf("level(%d)", uint8(l))
}

func parseLevel(s string) (Level, bool) {
	switch s {
	case "read":
		return Read, true
	case "write":
		return Write, true
	case "admin":
		return Admin, true
	}
	return 0, false
}

// Scope grants a level on every stream whose name starts with Prefix.
type Scope struct {
	Level  Level
	Prefix string
}

func (s Scope) String() string {
	if s.Level == Metrics {
		return ScopeMetrics
	}
	return s.Level.String() + ":" + s.Prefix
}

// covers reports whether s permits level on name.
func (s Scope) covers(level Level, name string) bool {
	if !strings.HasPrefix(name, s.Prefix) {
		return false
	}
	return s.Level == level || s.Level == Admin
}

// ParseScope parses "LEVEL:PREFIX", e.g. "write:/orders/", or "metrics".
// The prefix is a stream-name prefix, so it starts with "/"; "/" alone
// means every stream. "metrics" has no prefix: it names no streams.
func ParseScope(s string) (Scope, error) {
	if s == ScopeMetrics {
		return Scope{Level: Metrics}, nil
	}
	lv, prefix, ok := strings.Cut(s, ":")
	level, known := parseLevel(lv)
	if !ok || !known {
		return Scope{}, fmt.Errorf("scope %q: want read:PREFIX, write:PREFIX, admin:PREFIX or metrics", s)
	}
	if prefix == "" || prefix[0] != '/' {
		return Scope{}, fmt.Errorf("scope %q: the prefix is a stream-name prefix and starts with '/' (\"/\" = every stream)", s)
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c < 0x21 || c == 0x7f {
			return Scope{}, fmt.Errorf("scope %q: control character or space in the prefix", s)
		}
	}
	return Scope{Level: level, Prefix: prefix}, nil
}

// Principal is an authenticated token: its name (for logs and metrics;
// never the secret) and what it may do.
type Principal struct {
	Name   string
	Scopes []Scope
	// limiter is nil for an unlimited token.
	limiter *rate.Limiter
}

// Allows reports whether the principal may act at level on the stream
// name (or stream-name prefix, for listings).
func (p *Principal) Allows(level Level, name string) bool {
	if p == nil {
		return false
	}
	for _, s := range p.Scopes {
		if s.covers(level, name) {
			return true
		}
	}
	return false
}

// ScrapeOnly reports whether every scope of the principal is "metrics":
// such a token may GET /metrics and is refused everything else, Kafka
// included, so a leaked Prometheus credential reveals no stream, topic
// or member.
func (p *Principal) ScrapeOnly() bool {
	if p == nil || len(p.Scopes) == 0 {
		return false
	}
	for _, s := range p.Scopes {
		if s.Level != Metrics {
			return false
		}
	}
	return true
}

// Take spends one request from the principal's rate limit. When it is
// exhausted it returns false and how long until a request would pass.
func (p *Principal) Take(now time.Time) (bool, time.Duration) {
	if p == nil || p.limiter == nil {
		return true, 0
	}
	r := p.limiter.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// Errors of Authenticate.
var (
	ErrNoToken      = errors.New("auth: no token")
	ErrInvalidToken = errors.New("auth: invalid token")
)

// Checker is what a listener needs to authenticate a client. Kafka's SASL
// code takes it as well as the HTTP middleware.
type Checker interface {
	// Authenticate returns the principal a bearer token belongs to, or
	// ErrNoToken / ErrInvalidToken.
	Authenticate(token string) (*Principal, error)
}

// Store is a Checker over a token file, reloadable without a restart.
type Store struct {
	path string
	mu   sync.Mutex // serialises Reload
	cur  atomic.Pointer[tokenSet]
}

type tokenSet struct {
	hashes [][sha256.Size]byte
	users  []*Principal
	// scram: the scopes of SCRAM users by user name (the token file's
	// users: list); their credentials live in etcd.
	scram map[string]*Principal
}

// Load reads the token file at path.
func Load(path string) (*Store, error) {
	s := &Store{path: path}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Path is the token file the store reads.
func (s *Store) Path() string { return s.path }

// Len is the number of tokens loaded.
func (s *Store) Len() int { return len(s.cur.Load().users) }

// Reload re-reads the token file. On error the tokens in force stay in
// force, so a typo during an edit never locks everyone out. Rate-limit
// state carries over for tokens whose name and limits did not change.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	set, err := parse(b)
	if err != nil {
		return fmt.Errorf("token file %s: %w", s.path, err)
	}
	if old := s.cur.Load(); old != nil {
		prev := map[string]*rate.Limiter{}
		for _, p := range old.all() {
			if p.limiter != nil {
				prev[p.Name] = p.limiter
			}
		}
		for _, p := range set.all() {
			if l := prev[p.Name]; l != nil && p.limiter != nil && l.Limit() == p.limiter.Limit() && l.Burst() == p.limiter.Burst() {
				p.limiter = l
			}
		}
	}
	s.cur.Store(set)
	return nil
}

// Authenticate implements Checker. The presented token is hashed and the
// hash compared with every entry in constant time, so neither the match
// position nor a partial match shows in the timing.
func (s *Store) Authenticate(token string) (*Principal, error) {
	if token == "" {
		return nil, ErrNoToken
	}
	h := sha256.Sum256([]byte(token))
	set := s.cur.Load()
	found := -1
	for i := range set.hashes {
		if subtle.ConstantTimeCompare(h[:], set.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, ErrInvalidToken
	}
	return set.users[found], nil
}

// ErrNoScopes: a SCRAM user the token file grants nothing.
var ErrNoScopes = errors.New("auth: no scopes granted to this user (users: in the token file)")

// ScramUser returns the principal of a SCRAM user: the scopes the token
// file's users: list grants the name. A user not listed gets
// ErrNoScopes, so a credential alone never grants access.
func (s *Store) ScramUser(name string) (*Principal, error) {
	if p := s.cur.Load().scram[name]; p != nil {
		return p, nil
	}
	return nil, ErrNoScopes
}

// all is every principal of the set: tokens, then SCRAM users.
func (t *tokenSet) all() []*Principal {
	out := append([]*Principal(nil), t.users...)
	for _, p := range t.scram {
		out = append(out, p)
	}
	return out
}

// HashToken is the hex SHA-256 of a token, as the token file stores it.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// MaxFileBytes bounds a token file; a larger one is refused.
const MaxFileBytes = 4 << 20

type fileYAML struct {
	Tokens []entryYAML `yaml:"tokens"`
	Users  []userYAML  `yaml:"users"`
}

// userYAML grants scopes to a SCRAM user (Kafka SASL SCRAM-SHA-256/512);
// the user's salted credentials are set with AlterUserScramCredentials
// and kept in etcd, never in this file.
type userYAML struct {
	Name   string   `yaml:"name"`
	Scopes []string `yaml:"scopes"`
	Rate   float64  `yaml:"rate"`
	Burst  int      `yaml:"burst"`
}

type entryYAML struct {
	Name   string   `yaml:"name"`
	SHA256 string   `yaml:"sha256"`
	Scopes []string `yaml:"scopes"`
	Rate   float64  `yaml:"rate"`
	Burst  int      `yaml:"burst"`
}

// ParseFile parses token-file bytes; it is what Reload uses, exposed for
// validation tools and the fuzz target.
func ParseFile(b []byte) (n int, err error) {
	set, err := parse(b)
	if err != nil {
		return 0, err
	}
	return len(set.users), nil
}

func parse(b []byte) (*tokenSet, error) {
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	var f fileYAML
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file: want a tokens: list")
		}
		return nil, err
	}
	if len(f.Tokens) == 0 && len(f.Users) == 0 {
		return nil, errors.New("no tokens: want a tokens: list (an empty list would lock every client out)")
	}
	set := &tokenSet{}
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]string{}
	for i, e := range f.Tokens {
		where := fmt.Sprintf("tokens[%d]", i)
		if e.Name == "" {
			return nil, fmt.Errorf("%s: name is required", where)
		}
		if len(e.Name) > 128 || strings.ContainsFunc(e.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%s: name must be at most 128 printable characters", where)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%s: duplicate name %q", where, e.Name)
		}
		names[e.Name] = true
		raw, err := hex.DecodeString(e.SHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, fmt.Errorf("%s (%s): sha256 must be 64 hex digits (the hash of the token, never the token; see `picomq token`)", where, e.Name)
		}
		var h [sha256.Size]byte
		copy(h[:], raw)
		if other, dup := hashes[h]; dup {
			return nil, fmt.Errorf("%s (%s): same token hash as %q", where, e.Name, other)
		}
		hashes[h] = e.Name
		p, err := newPrincipal(e.Name, e.Scopes, e.Rate, e.Burst)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, e.Name, err)
		}
		set.hashes = append(set.hashes, h)
		set.users = append(set.users, p)
	}
	set.scram = map[string]*Principal{}
	for i, u := range f.Users {
		where := fmt.Sprintf("users[%d]", i)
		if u.Name == "" || len(u.Name) > 128 || strings.ContainsFunc(u.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return nil, fmt.Errorf("%s: name is required, at most 128 printable characters", where)
		}
		if set.scram[u.Name] != nil {
			return nil, fmt.Errorf("%s: duplicate user %q", where, u.Name)
		}
		p, err := newPrincipal(u.Name, u.Scopes, u.Rate, u.Burst)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", where, u.Name, err)
		}
		set.scram[u.Name] = p
	}
	return set, nil
}

// newPrincipal builds a token's or SCRAM user's principal from its
// scopes and rate limit.
func newPrincipal(name string, scopes []string, rateLimit float64, burst int) (*Principal, error) {
	if len(scopes) == 0 {
		return nil, errors.New("at least one scope is required")
	}
	p := &Principal{Name: name}
	for _, sc := range scopes {
		s, err := ParseScope(sc)
		if err != nil {
			return nil, err
		}
		p.Scopes = append(p.Scopes, s)
	}
	if rateLimit < 0 || burst < 0 || rateLimit > 1e9 || burst > 1e9 {
		return nil, errors.New("rate and burst must be between 0 and 1e9")
	}
	if rateLimit > 0 {
		if burst == 0 {
			burst = max(1, int(rateLimit))
		}
		p.limiter = rate.NewLimiter(rate.Limit(rateLimit), burst)
	}
	return p, nil
}
