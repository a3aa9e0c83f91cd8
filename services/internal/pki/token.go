package pki

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultBootstrapTokenTTL is a bootstrap token's lifetime unless told otherwise:
// kubeadm's 24 hours (kubeadm token create --ttl, kubeadm init's bootstrap token).
const DefaultBootstrapTokenTTL = 24 * time.Hour

// Bootstrap token Secrets, as kubeadm writes them and the apiserver reads them: Secret
// kube-system/bootstrap-token-<id> of type bootstrap.kubernetes.io/token. Mirrors
// k8s.io/cluster-bootstrap/token/api.
const (
	// SecretTypeBootstrapToken is the type of a bootstrap token Secret.
	SecretTypeBootstrapToken = corev1.SecretType("bootstrap.kubernetes.io/token")
	// BootstrapTokenSecretPrefix starts a bootstrap token Secret's name.
	BootstrapTokenSecretPrefix = "bootstrap-token-"
	// BootstrapTokenIDKey and BootstrapTokenSecretKey hold the token's two halves.
	BootstrapTokenIDKey     = "token-id"
	BootstrapTokenSecretKey = "token-secret"
	// BootstrapTokenExpirationKey holds when the token stops working (RFC 3339); absent
	// means never.
	BootstrapTokenExpirationKey = "expiration"
	// BootstrapTokenDescriptionKey holds a description for people.
	BootstrapTokenDescriptionKey = "description"
	// BootstrapTokenExtraGroupsKey holds the comma-separated groups, each starting with
	// system:bootstrappers:, the token authenticates in besides system:bootstrappers.
	BootstrapTokenExtraGroupsKey = "auth-extra-groups"
	// BootstrapTokenUsagePrefix starts the keys of the token's usages; a usage is on
	// when its key holds "true": usage-bootstrap-authentication lets it authenticate,
	// usage-bootstrap-signing lets it sign the cluster-info ConfigMap.
	BootstrapTokenUsagePrefix = "usage-bootstrap-"
	// BootstrapDefaultGroup is the group every bootstrap token authenticates in.
	BootstrapDefaultGroup = "system:bootstrappers"
)

// BootstrapTokenSecretName is the name of token id's Secret in kube-system.
func BootstrapTokenSecretName(id string) string { return BootstrapTokenSecretPrefix + id }

// BootstrapTokenSecret is the kube-system Secret carrying t: its id and secret, its
// expiration when it has one, description when not empty, "true" for each of usages
// (e.g. "authentication", "signing") and the extra groups. Mirrors kubeadm's
// BootstrapToken.ToSecret (cmd/kubeadm/app/apis/bootstraptoken/v1).
func BootstrapTokenSecret(t BootstrapToken, description string, usages, groups []string) *corev1.Secret {
	data := map[string][]byte{BootstrapTokenIDKey: []byte(t.ID), BootstrapTokenSecretKey: []byte(t.Secret)}
	if description != "" {
		data[BootstrapTokenDescriptionKey] = []byte(description)
	}
	if !t.Expiration.IsZero() {
		data[BootstrapTokenExpirationKey] = []byte(t.Expiration.UTC().Format(time.RFC3339))
	}
	for _, u := range usages {
		data[BootstrapTokenUsagePrefix+u] = []byte("true")
	}
	if len(groups) > 0 {
		data[BootstrapTokenExtraGroupsKey] = []byte(strings.Join(groups, ","))
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: BootstrapTokenSecretName(t.ID), Namespace: metav1.NamespaceSystem},
		Type:       SecretTypeBootstrapToken,
		Data:       data,
	}
}

// BootstrapTokenSecretExpiration returns how long the token of sec, a bootstrap token
// Secret, has left at now, and whether it has expired: ttl 0 and not expired for one
// without an expiration; an expiration that does not parse counts as expired. Mirrors
// GetExpiration of k8s.io/cluster-bootstrap/util/secrets.
func BootstrapTokenSecretExpiration(sec *corev1.Secret, now time.Time) (ttl time.Duration, expired bool) {
	exp := string(sec.Data[BootstrapTokenExpirationKey])
	if exp == "" {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339, exp)
	if err != nil || !now.Before(t) {
		return 0, true
	}
	return t.Sub(now), false
}

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

// EnsureBootstrapToken keeps the bootstrap token file at path fit to hand a joining
// kubelet a token, as the all-in-one does at each start: it drops the tokens that have
// expired, adds a new one of lifetime ttl (0: never expires) when none of those left
// stays valid for minValid more, writes the file atomically (mode 0600) when it changed,
// and returns the token to give out: the one valid longest. With ttl > 0 a token that
// never expires (one a person added, or an older skiff made) is kept in the file but
// never given out; with ttl 0 it is given out first. A missing file is created. Errors: ttl shorter than minValid (a new token
// would not do either), an unreadable or malformed file (left as it is), an unwritable
// directory.
func EnsureBootstrapToken(path string, ttl, minValid time.Duration) (BootstrapToken, error) {
	if ttl > 0 && ttl < minValid {
		return BootstrapToken{}, fmt.Errorf("bootstrap token lifetime %v is shorter than the %v it must stay valid", ttl, minValid)
	}
	tokens, err := ReadBootstrapTokens(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return BootstrapToken{}, err
	}
	now := time.Now()
	kept := make([]BootstrapToken, 0, len(tokens)+1)
	for _, t := range tokens {
		if !t.Expired(now) {
			kept = append(kept, t)
		}
	}
	changed := len(kept) != len(tokens) || errors.Is(err, fs.ErrNotExist)
	candidates := kept
	if ttl > 0 {
		candidates = slices.DeleteFunc(slices.Clone(kept), func(t BootstrapToken) bool { return t.Expiration.IsZero() })
	}
	best, found := longestValid(candidates)
	if !found || best.Expired(now.Add(minValid)) {
		if best, err = NewBootstrapToken(ttl); err != nil {
			return BootstrapToken{}, err
		}
		kept, changed = append(kept, best), true
	}
	if changed {
		if err := WriteFileAtomic(path, FormatBootstrapTokens(kept), 0o600); err != nil {
			return BootstrapToken{}, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return best, nil
}

// longestValid is the token of tokens that expires last, one without expiration first;
// found is false when tokens is empty.
func longestValid(tokens []BootstrapToken) (best BootstrapToken, found bool) {
	for _, t := range tokens {
		if !found || outlasts(t, best) {
			best, found = t, true
		}
	}
	return best, found
}

// outlasts reports whether a stays valid longer than b.
func outlasts(a, b BootstrapToken) bool {
	if b.Expiration.IsZero() {
		return false
	}
	return a.Expiration.IsZero() || a.Expiration.After(b.Expiration)
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
