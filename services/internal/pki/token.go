package pki

import (
	"crypto/rand"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// BootstrapToken is a kubelet bootstrap token, "<id>.<secret>" (kube's
// k8s.io/cluster-bootstrap/token/api: id [a-z0-9]{6}, secret [a-z0-9]{16}). A request
// bearing it authenticates as system:bootstrap:<id> in system:bootstrappers until
// Expiration.
type BootstrapToken struct {
	ID     string
	Secret string
	// Expiration is when the token stops working; zero means never.
	Expiration time.Time
}

// bootstrapTokenPattern is kube's BootstrapTokenPattern.
var bootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// String is the bearer token, "<id>.<secret>".
func (t BootstrapToken) String() string { return t.ID + "." + t.Secret }

// Expired reports whether t has expired at now.
func (t BootstrapToken) Expired(now time.Time) bool {
	return !t.Expiration.IsZero() && !now.Before(t.Expiration)
}

// ParseBootstrapToken splits "<id>.<secret>"; ok is false when s does not have that shape.
func ParseBootstrapToken(s string) (id, secret string, ok bool) {
	m := bootstrapTokenPattern.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// NewBootstrapToken makes a random token that expires after ttl (0: never).
func NewBootstrapToken(ttl time.Duration) (BootstrapToken, error) {
	id, err := randomString(6)
	if err != nil {
		return BootstrapToken{}, err
	}
	secret, err := randomString(16)
	if err != nil {
		return BootstrapToken{}, err
	}
	tok := BootstrapToken{ID: id, Secret: secret}
	if ttl > 0 {
		tok.Expiration = time.Now().Add(ttl).UTC().Truncate(time.Second)
	}
	return tok, nil
}

// FormatBootstrapTokens writes tokens in the bootstrap token file format: one
// "<id>.<secret>[,<expiration RFC 3339>]" per line; lines starting with # are comments.
func FormatBootstrapTokens(tokens []BootstrapToken) []byte {
	var b strings.Builder
	b.WriteString("# skiff bootstrap tokens: <id>.<secret>[,<expiration RFC 3339>]\n")
	for _, t := range tokens {
		b.WriteString(t.String())
		if !t.Expiration.IsZero() {
			b.WriteString("," + t.Expiration.UTC().Format(time.RFC3339))
		}
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// ReadBootstrapTokens reads a bootstrap token file (FormatBootstrapTokens). Errors: an
// unreadable file, a malformed token or expiration (with its line).
func ReadBootstrapTokens(path string) ([]BootstrapToken, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseBootstrapTokens(data)
}

// ParseBootstrapTokens parses the bootstrap token file format.
func ParseBootstrapTokens(data []byte) ([]BootstrapToken, error) {
	var tokens []BootstrapToken
	for i, line := range trimLines(data) {
		tokenPart, expPart, _ := strings.Cut(line, ",")
		id, secret, ok := ParseBootstrapToken(strings.TrimSpace(tokenPart))
		if !ok {
			return nil, fmt.Errorf("bootstrap token %d: want <[a-z0-9]{6}>.<[a-z0-9]{16}>", i+1)
		}
		tok := BootstrapToken{ID: id, Secret: secret}
		if expPart = strings.TrimSpace(expPart); expPart != "" {
			exp, err := time.Parse(time.RFC3339, expPart)
			if err != nil {
				return nil, fmt.Errorf("bootstrap token %d: expiration: %w", i+1, err)
			}
			tok.Expiration = exp
		}
		tokens = append(tokens, tok)
	}
	return tokens, nil
}

// randomString is n characters of [a-z0-9], uniformly drawn.
func randomString(n int) (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	out := make([]byte, 0, n)
	buf := make([]byte, 2*n)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, c := range buf {
			// 252 = 7*36: reject the tail so every character is equally likely.
			if c < 252 && len(out) < n {
				out = append(out, alphabet[int(c)%len(alphabet)])
			}
		}
	}
	return string(out), nil
}
