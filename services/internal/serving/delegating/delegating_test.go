package delegating_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
	"skiff.dev/services/internal/serving/delegating"
)

// TestAnswersAreKeptForTheirTTL: what the apiserver answered about a caller holds
// until its TTL runs out, as kube's webhook caches hold it: a refusal outlives a new
// binding for DenyCacheTTL, and an authenticated token outlives its service account for
// CacheTTL.
func TestAnswersAreKeptForTheirTTL(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	ctx := context.Background()
	admin, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	component, err := kubernetes.NewForConfig(s.ClientConfig(pki.Scheduler.CommonName, pki.Scheduler.Organizations...))
	if err != nil {
		t.Fatal(err)
	}
	const denyTTL = 2 * time.Second
	authn := delegating.NewAuthenticator(delegating.AuthenticatorConfig{TokenReviews: component.AuthenticationV1().TokenReviews(), CacheTTL: time.Hour})
	authz, err := delegating.NewAuthorizer(delegating.AuthorizerConfig{
		SubjectAccessReviews: component.AuthorizationV1().SubjectAccessReviews(), AllowCacheTTL: time.Hour, DenyCacheTTL: denyTTL,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(delegating.WithAuth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), authn, authz))
	defer srv.Close()

	sa, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	get := func() int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusForbidden {
		t.Fatalf("before any binding: %d, want 403", code)
	}
	bound := time.Now()
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "late-monitoring"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:monitoring"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: sa.Name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code := get(); code != http.StatusForbidden && time.Since(bound) < denyTTL {
		t.Fatalf("right after the binding: %d, want the cached 403", code)
	}
	for get() != http.StatusOK {
		if time.Since(bound) > denyTTL+10*time.Second {
			t.Fatalf("still refused %s after the binding, DenyCacheTTL %s", time.Since(bound), denyTTL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if time.Since(bound) < denyTTL-100*time.Millisecond {
		t.Errorf("allowed %s after the binding, before DenyCacheTTL %s ran out", time.Since(bound), denyTTL)
	}

	if err := admin.CoreV1().ServiceAccounts("default").Delete(ctx, sa.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	review, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
	if err != nil || review.Status.Authenticated {
		t.Fatalf("the apiserver still accepts the deleted service account's token: %+v, %v", review.Status, err)
	}
	if code := get(); code != http.StatusOK {
		t.Errorf("within CacheTTL of the last TokenReview: %d, want the cached 200", code)
	}
}
