// Package token is the kubelet's service account token manager: it requests
// pod-bound tokens through the TokenRequest API and caches each until it
// must be refreshed, so projected volumes can rewrite their token files
// before they expire. Mirrors k8s.io/kubernetes pkg/kubelet/token.
package token

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

const (
	// maxTTL is the longest a token is used before it is refreshed, whatever
	// its expiration.
	maxTTL = 24 * time.Hour
	// maxJitter spreads refreshes so that tokens requested together are not
	// refreshed together.
	maxJitter = 10 * time.Second
	// gcPeriod is how often expired tokens leave the cache.
	gcPeriod = time.Minute
)

// Manager caches service account tokens. Safe for concurrent use.
type Manager struct {
	getToken func(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error)
	clock    clock.WithTicker

	mu    sync.Mutex
	cache map[string]*authenticationv1.TokenRequest
}

// NewManager returns a Manager that requests tokens with client's
// CoreV1().ServiceAccounts(ns).CreateToken.
func NewManager(client kubernetes.Interface) *Manager {
	return newManager(client, clock.RealClock{})
}

func newManager(client kubernetes.Interface, c clock.WithTicker) *Manager {
	return &Manager{
		getToken: func(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
			return client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, tr, metav1.CreateOptions{})
		},
		clock: c,
		cache: map[string]*authenticationv1.TokenRequest{},
	}
}

// Run drops expired tokens every minute until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.clock.NewTicker(gcPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			m.cleanup()
		}
	}
}

// GetServiceAccountToken returns a token for service account namespace/name
// as tr asks (audiences, expirationSeconds, boundObjectRef): the cached one
// while it is fresh, else a new one. When the request fails but the cached
// token has not expired yet, the cached token is returned and the error
// dropped, so a short apiserver outage does not break pods. Mirrors
// token.Manager.GetServiceAccountToken.
func (m *Manager) GetServiceAccountToken(ctx context.Context, namespace, name string, tr *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	key := keyFunc(namespace, name, tr)
	m.mu.Lock()
	cached, ok := m.cache[key]
	m.mu.Unlock()
	if ok && !m.requiresRefresh(cached) {
		return cached, nil
	}
	fresh, err := m.getToken(ctx, namespace, name, tr)
	if err != nil {
		if ok && !m.expired(cached) {
			return cached, nil
		}
		return nil, fmt.Errorf("request token: %w", err)
	}
	m.mu.Lock()
	m.cache[key] = fresh
	m.mu.Unlock()
	return fresh, nil
}

// DeleteServiceAccountToken forgets the tokens bound to pod podUID. Mirrors
// token.Manager.DeleteServiceAccountToken.
func (m *Manager) DeleteServiceAccountToken(podUID types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if ref := tr.Spec.BoundObjectRef; ref != nil && ref.UID == podUID {
			delete(m.cache, k)
		}
	}
}

func (m *Manager) cleanup() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, tr := range m.cache {
		if m.expired(tr) {
			delete(m.cache, k)
		}
	}
}

func (m *Manager) expired(tr *authenticationv1.TokenRequest) bool {
	return !m.clock.Now().Before(tr.Status.ExpirationTimestamp.Time)
}

// requiresRefresh reports whether a token is older than 24 h, or has less
// than 20% of its lifetime left (each less a random jitter of up to 10 s).
// Mirrors token.Manager.requiresRefresh.
func (m *Manager) requiresRefresh(tr *authenticationv1.TokenRequest) bool {
	if tr.Spec.ExpirationSeconds == nil {
		return false
	}
	now := m.clock.Now()
	exp := tr.Status.ExpirationTimestamp.Time
	lifetime := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
	iat := exp.Add(-lifetime)
	jitter := time.Duration(rand.Float64() * float64(maxJitter))
	if now.After(iat.Add(maxTTL - jitter)) {
		return true
	}
	return now.After(exp.Add(-lifetime/5 - jitter))
}

// keyFunc identifies a request: the service account and everything in its
// spec. Mirrors token's keyFunc.
func keyFunc(namespace, name string, tr *authenticationv1.TokenRequest) string {
	var exp int64
	if tr.Spec.ExpirationSeconds != nil {
		exp = *tr.Spec.ExpirationSeconds
	}
	var ref authenticationv1.BoundObjectReference
	if tr.Spec.BoundObjectRef != nil {
		ref = *tr.Spec.BoundObjectRef
	}
	return fmt.Sprintf("%q/%q/%#v/%#v/%#v", name, namespace, strings.Join(tr.Spec.Audiences, ","), exp, ref)
}
