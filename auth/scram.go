package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"unicode/utf8"
)

// SCRAM (RFC 5802, RFC 7677) as Kafka uses it: the server keeps only a
// salted credential per user (salt, iterations, StoredKey, ServerKey), so
// what is stored cannot be replayed as a password, and each login proves
// knowledge of the password without sending it.

// ScramMechanism is one SCRAM hash: SCRAM-SHA-256 or SCRAM-SHA-512.
type ScramMechanism struct {
	Name string
	// KafkaType is the mechanism's number in Kafka's
	// {Alter,Describe}UserScramCredentials (1 = SHA-256, 2 = SHA-512).
	KafkaType int8
	newHash   func() hash.Hash
}

// The SCRAM mechanisms served.
var (
	ScramSHA256 = ScramMechanism{Name: "SCRAM-SHA-256", KafkaType: 1, newHash: sha256.New}
	ScramSHA512 = ScramMechanism{Name: "SCRAM-SHA-512", KafkaType: 2, newHash: sha512.New}
)

// ScramMechanisms lists the mechanisms, SHA-256 first.
var ScramMechanisms = []ScramMechanism{ScramSHA256, ScramSHA512}

// ScramByName returns the mechanism called name.
func ScramByName(name string) (ScramMechanism, bool) {
	for _, m := range ScramMechanisms {
		if m.Name == name {
			return m, true
		}
	}
	return ScramMechanism{}, false
}

// ScramByKafkaType returns the mechanism with Kafka's number t.
func ScramByKafkaType(t int8) (ScramMechanism, bool) {
	for _, m := range ScramMechanisms {
		if m.KafkaType == t {
			return m, true
		}
	}
	return ScramMechanism{}, false
}

// Iteration bounds of a stored credential: RFC 7677's minimum, and
// Kafka's maximum (a credential costlier than that would make every login
// a CPU burden for the broker).
const (
	ScramMinIterations = 4096
	ScramMaxIterations = 16384
)

// ScramCredential is what the server stores for one user and mechanism:
// never the password, nor the salted password.
type ScramCredential struct {
	Salt       []byte
	Iterations int
	StoredKey  []byte
	ServerKey  []byte
}

// Hi is RFC 5802's Hi(): PBKDF2 with the mechanism's HMAC, one block.
func (m ScramMechanism) Hi(password string, salt []byte, iterations int) ([]byte, error) {
	return pbkdf2.Key(m.newHash, password, salt, iterations, m.newHash().Size())
}

// CredentialFromSalted derives the stored credential from a salted
// password (what AlterUserScramCredentials carries: the client computes
// Hi(password, salt, i) so the password never reaches the broker).
func (m ScramMechanism) CredentialFromSalted(saltedPassword, salt []byte, iterations int) (ScramCredential, error) {
	if len(salt) == 0 {
		return ScramCredential{}, errors.New("empty salt")
	}
	if len(saltedPassword) == 0 {
		return ScramCredential{}, errors.New("empty salted password")
	}
	if iterations < ScramMinIterations || iterations > ScramMaxIterations {
		return ScramCredential{}, fmt.Errorf("iterations %d: want %d to %d", iterations, ScramMinIterations, ScramMaxIterations)
	}
	clientKey := m.hmac(saltedPassword, []byte("Client Key"))
	h := m.newHash()
	h.Write(clientKey)
	return ScramCredential{
		Salt:       append([]byte(nil), salt...),
		Iterations: iterations,
		StoredKey:  h.Sum(nil),
		ServerKey:  m.hmac(saltedPassword, []byte("Server Key")),
	}, nil
}

// NewCredential derives a credential from a password with a fresh random
// salt (tests and tools; Kafka clients send salted passwords instead).
func (m ScramMechanism) NewCredential(password string, iterations int) (ScramCredential, error) {
	salt := make([]byte, 24)
	_, _ = rand.Read(salt)
	salted, err := m.Hi(password, salt, iterations)
	if err != nil {
		return ScramCredential{}, err
	}
	return m.CredentialFromSalted(salted, salt, iterations)
}

func (m ScramMechanism) hmac(key, msg []byte) []byte {
	mac := hmac.New(m.newHash, key)
	mac.Write(msg)
	return mac.Sum(nil)
}

// ScramClientFirst is a parsed client-first-message.
type ScramClientFirst struct {
	GS2Header string // "n,," or "y,," (with an authzid: "n,a=...,")
	AuthzID   string
	User      string // saslname unescaped (=2C -> ",", =3D -> "=")
	Nonce     string
	Bare      string // client-first-message-bare, for the AuthMessage
	// Extensions are Kafka's SCRAM extensions (KIP-84: tokenauth=true
	// for delegation tokens), key -> value.
	Extensions map[string]string
}

// ScramClientFinal is a parsed client-final-message.
type ScramClientFinal struct {
	ChannelBinding string // base64 as sent
	Nonce          string
	Proof          []byte
	WithoutProof   string // client-final-message-without-proof
}

// ParseScramClientFirst parses gs2-header client-first-message-bare
// (RFC 5802 section 7). Channel binding ("p=") is refused: Kafka has none.
func ParseScramClientFirst(b []byte) (ScramClientFirst, error) {
	var cf ScramClientFirst
	s := string(b)
	if !validUTF8Printable(s) {
		return cf, errors.New("scram: client-first message is not printable UTF-8")
	}
	// gs2-header = gs2-cbind-flag "," [ authzid ] ","
	flag, rest, ok := strings.Cut(s, ",")
	if !ok {
		return cf, errors.New("scram: client-first message without gs2 header")
	}
	switch {
	case flag == "n", flag == "y":
	case strings.HasPrefix(flag, "p="):
		return cf, errors.New("scram: channel binding is not supported")
	default:
		return cf, fmt.Errorf("scram: bad gs2 channel-binding flag %q", flag)
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return cf, errors.New("scram: client-first message with an unterminated gs2 header")
	}
	if authz != "" {
		v, ok := strings.CutPrefix(authz, "a=")
		if !ok {
			return cf, errors.New("scram: bad authzid in gs2 header")
		}
		u, err := unescapeSaslName(v)
		if err != nil {
			return cf, err
		}
		cf.AuthzID = u
	}
	cf.GS2Header = s[:len(s)-len(bare)]
	cf.Bare = bare
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 {
		return cf, errors.New("scram: client-first message needs n= and r=")
	}
	if strings.HasPrefix(attrs[0], "m=") {
		return cf, errors.New("scram: mandatory extension (m=) not supported")
	}
	v, ok := strings.CutPrefix(attrs[0], "n=")
	if !ok {
		return cf, errors.New("scram: client-first message must start with n=")
	}
	u, err := unescapeSaslName(v)
	if err != nil {
		return cf, err
	}
	if u == "" {
		return cf, errors.New("scram: empty user name")
	}
	cf.User = u
	if cf.Nonce, ok = strings.CutPrefix(attrs[1], "r="); !ok || cf.Nonce == "" {
		return cf, errors.New("scram: client-first message without a nonce (r=)")
	}
	if !validNonce(cf.Nonce) {
		return cf, errors.New("scram: nonce contains ','")
	}
	for _, ext := range attrs[2:] {
		k, v, ok := strings.Cut(ext, "=")
		if !ok || k == "" {
			return cf, fmt.Errorf("scram: bad extension %q", ext)
		}
		if cf.Extensions == nil {
			cf.Extensions = map[string]string{}
		}
		cf.Extensions[k] = v
	}
	if cf.AuthzID != "" && cf.AuthzID != cf.User {
		return cf, errors.New("scram: authzid differs from the user name")
	}
	return cf, nil
}

// ParseScramClientFinal parses c=... ,r=... [,ext]* ,p=... (RFC 5802
// section 7); the proof must come last.
func ParseScramClientFinal(b []byte) (ScramClientFinal, error) {
	var cf ScramClientFinal
	s := string(b)
	if !validUTF8Printable(s) {
		return cf, errors.New("scram: client-final message is not printable UTF-8")
	}
	i := strings.LastIndex(s, ",p=")
	if i < 0 {
		return cf, errors.New("scram: client-final message without a proof (p=)")
	}
	cf.WithoutProof = s[:i]
	proof, err := base64.StdEncoding.Strict().DecodeString(s[i+3:])
	if err != nil || len(proof) == 0 {
		return cf, errors.New("scram: proof is not base64")
	}
	cf.Proof = proof
	attrs := strings.Split(cf.WithoutProof, ",")
	if len(attrs) < 2 {
		return cf, errors.New("scram: client-final message needs c= and r=")
	}
	var ok bool
	if cf.ChannelBinding, ok = strings.CutPrefix(attrs[0], "c="); !ok {
		return cf, errors.New("scram: client-final message must start with c=")
	}
	if cf.Nonce, ok = strings.CutPrefix(attrs[1], "r="); !ok || cf.Nonce == "" {
		return cf, errors.New("scram: client-final message without a nonce (r=)")
	}
	return cf, nil
}

func validUTF8Printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// validNonce: printable ASCII except ',' (RFC 5802 "printable").
func validNonce(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}

// unescapeSaslName undoes RFC 5802's saslname escaping: "=2C" is ',',
// "=3D" is '='; any other '=' is an error.
func unescapeSaslName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", errors.New("scram: bad '=' escape in user name")
		}
		i += 2
	}
	return b.String(), nil
}

// ScramLookup finds the stored credential of user for a mechanism; ok is
// false when the user has none.
type ScramLookup func(user string) (cred ScramCredential, ok bool, err error)

// ScramConversation is the server side of one SCRAM login: Start with the
// client-first message, Finish with the client-final one.
type ScramConversation struct {
	mech        ScramMechanism
	user        string
	cred        ScramCredential
	known       bool // false: the user has no credential; Finish fails
	gs2         string
	authMessage string // client-first-bare "," server-first (the final part added by Finish)
	nonce       string // client nonce + server nonce
	done        bool
}

// ErrScramAuth is every login failure a client may learn of: unknown user
// and wrong password are not told apart.
var ErrScramAuth = errors.New("invalid SCRAM credentials")

// fakeSaltKey makes the salt sent for an unknown user stable per user, so
// a client cannot tell a missing user by a salt that changes between
// attempts (RFC 5802 section 5.1's advice).
var fakeSaltKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// scramServerNonce is the server's part of the nonce: 192 random bits
// (a variable so the RFC 7677 test vector can be replayed).
var scramServerNonce = func() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// StartScram checks the client-first message, looks the user up, and
// returns the server-first message. A user without a credential gets a
// plausible answer and fails at Finish.
func (m ScramMechanism) StartScram(clientFirst []byte, lookup ScramLookup) (*ScramConversation, []byte, error) {
	cf, err := ParseScramClientFirst(clientFirst)
	if err != nil {
		return nil, nil, err
	}
	if cf.Extensions["tokenauth"] == "true" {
		return nil, nil, errors.New("scram: delegation tokens (tokenauth) are not supported")
	}
	cred, ok, err := lookup(cf.User)
	if err != nil {
		return nil, nil, fmt.Errorf("scram: credential of %q: %w", cf.User, err)
	}
	if !ok {
		cred = ScramCredential{Salt: m.hmac(fakeSaltKey, []byte(m.Name+"\x00"+cf.User))[:24], Iterations: ScramMinIterations}
	}
	c := &ScramConversation{mech: m, user: cf.User, cred: cred, known: ok, gs2: cf.GS2Header}
	c.nonce = cf.Nonce + scramServerNonce()
	serverFirst := "r=" + c.nonce + ",s=" + base64.StdEncoding.EncodeToString(cred.Salt) + ",i=" + strconv.Itoa(cred.Iterations)
	c.authMessage = cf.Bare + "," + serverFirst
	return c, []byte(serverFirst), nil
}

// User is the user name the client-first message named.
func (c *ScramConversation) User() string { return c.user }

// Finish checks the client-final message (channel binding echo, nonce,
// proof) and returns the server-final message carrying the server
// signature. Any failure is ErrScramAuth (wrapped with the reason for
// malformed messages).
func (c *ScramConversation) Finish(clientFinal []byte) ([]byte, error) {
	if c.done {
		return nil, errors.New("scram: conversation already finished")
	}
	c.done = true
	cf, err := ParseScramClientFinal(clientFinal)
	if err != nil {
		return nil, err
	}
	if cf.ChannelBinding != base64.StdEncoding.EncodeToString([]byte(c.gs2)) {
		return nil, errors.New("scram: channel binding (c=) does not match the gs2 header")
	}
	// RFC 5802 wants the nonce of server-first back; librdkafka sends
	// its own nonce in front of it. Kafka accepts any nonce that ends
	// with the server's (which holds the fresh server part), and so do we.
	if !strings.HasSuffix(cf.Nonce, c.nonce) {
		return nil, errors.New("scram: nonce does not match")
	}
	authMessage := []byte(c.authMessage + "," + cf.WithoutProof)
	clientSig := c.mech.hmac(c.cred.StoredKey, authMessage)
	if !c.known || len(cf.Proof) != len(clientSig) {
		return nil, ErrScramAuth
	}
	clientKey := make([]byte, len(clientSig))
	subtle.XORBytes(clientKey, cf.Proof, clientSig)
	h := c.mech.newHash()
	h.Write(clientKey)
	if subtle.ConstantTimeCompare(h.Sum(nil), c.cred.StoredKey) != 1 {
		return nil, ErrScramAuth
	}
	serverSig := c.mech.hmac(c.cred.ServerKey, authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig)), nil
}
