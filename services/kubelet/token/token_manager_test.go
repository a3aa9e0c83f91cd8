package token

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeTokenAPI is client-go's fake clientset answering TokenRequests, since
// the apiserver's serviceaccounts/token is not served yet; it stamps each
// token with the fake clock and counts the requests.
type fakeTokenAPI struct {
	*fake.Clientset
	clock    *clocktesting.FakeClock
	requests int
	fail     bool
}

func newFakeTokenAPI(clock *clocktesting.FakeClock) *fakeTokenAPI {
	f := &fakeTokenAPI{Clientset: fake.NewClientset(), clock: clock}
	f.PrependReactor("create", "serviceaccounts", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateAction)
		if create.GetSubresource() != "token" {
			return false, nil, nil
		}
		if f.fail {
			return true, nil, errors.New("apiserver unavailable")
		}
		f.requests++
		tr := create.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		tr.Status.Token = fmt.Sprintf("token-%d", f.requests)
		tr.Status.ExpirationTimestamp = metav1.NewTime(f.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, tr, nil
	})
	return f
}

func request(seconds int64, audience string, podUID types.UID) *authenticationv1.TokenRequest {
	return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: &seconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: podUID},
	}}
}

func TestTokenRefreshedAt80PercentOfItsLifetime(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := newFakeTokenAPI(clock)
	m := newManager(api, clock)
	ctx := context.Background()
	get := func() string {
		t.Helper()
		tr, err := m.GetServiceAccountToken(ctx, "ns", "sa", request(3600, "api", "pod-1"))
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if got := get(); got != "token-1" {
		t.Fatalf("first token = %s", got)
	}
	clock.Step(79 * 36 * time.Second) // 79% of an hour
	if got := get(); got != "token-1" {
		t.Errorf("at 79%% of its lifetime the token was refreshed (%s)", got)
	}
	clock.Step(2 * 36 * time.Second) // 81%
	if got := get(); got != "token-2" {
		t.Errorf("at 81%% of its lifetime token = %s, want a fresh token-2", got)
	}
	if api.requests != 2 {
		t.Errorf("%d TokenRequests, want 2", api.requests)
	}
}

func TestLongLivedTokenRefreshedAfter24Hours(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := newFakeTokenAPI(clock)
	m := newManager(api, clock)
	req := request(7*24*3600, "api", "pod-1")
	first, _ := m.GetServiceAccountToken(context.Background(), "ns", "sa", req)
	clock.Step(23 * time.Hour)
	if tr, _ := m.GetServiceAccountToken(context.Background(), "ns", "sa", req); tr.Status.Token != first.Status.Token {
		t.Error("refreshed before 24 h")
	}
	clock.Step(time.Hour + time.Second)
	if tr, _ := m.GetServiceAccountToken(context.Background(), "ns", "sa", req); tr.Status.Token == first.Status.Token {
		t.Error("a week-long token was not refreshed after 24 h")
	}
}

func TestFailedRefreshKeepsAValidCachedToken(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := newFakeTokenAPI(clock)
	m := newManager(api, clock)
	req := request(3600, "api", "pod-1")
	if _, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", req); err != nil {
		t.Fatal(err)
	}
	api.fail = true
	clock.Step(50 * time.Minute)
	tr, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", req)
	if err != nil || tr.Status.Token != "token-1" {
		t.Errorf("while the apiserver fails: %v, %v; want the cached, still valid token-1", tr, err)
	}
	clock.Step(11 * time.Minute)
	if _, err := m.GetServiceAccountToken(context.Background(), "ns", "sa", req); err == nil {
		t.Error("an expired token was returned while the apiserver fails")
	}
}

func TestTokensAreKeyedByRequestAndForgottenWithThePod(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	api := newFakeTokenAPI(clock)
	m := newManager(api, clock)
	ctx := context.Background()
	a, _ := m.GetServiceAccountToken(ctx, "ns", "sa", request(3600, "api", "pod-1"))
	b, _ := m.GetServiceAccountToken(ctx, "ns", "sa", request(3600, "vault", "pod-1"))
	if a.Status.Token == b.Status.Token {
		t.Error("two audiences share one token")
	}
	m.DeleteServiceAccountToken("pod-1")
	if c, _ := m.GetServiceAccountToken(ctx, "ns", "sa", request(3600, "api", "pod-1")); c.Status.Token == a.Status.Token {
		t.Error("a token of a deleted pod was served from the cache")
	}
	clock.Step(2 * time.Hour)
	m.cleanup()
	if n := len(m.cache); n != 0 {
		t.Errorf("%d expired tokens left after cleanup", n)
	}
}
