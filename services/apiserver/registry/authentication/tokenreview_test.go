package authentication_test

import (
	"context"
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"skiff.dev/services/apiserver/serviceaccount"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTokenReview asks a real apiserver, as the scheduler does for its own callers, who
// each kind of bearer token belongs to.
func TestTokenReview(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	ctx := context.Background()
	admin := clientFor(t, s.Config)
	sa, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler's identity, which kube's RBAC lets create TokenReviews.
	scheduler := clientFor(t, s.ClientConfig(pki.Scheduler.CommonName, pki.Scheduler.Organizations...)).AuthenticationV1().TokenReviews()
	review := func(t *testing.T, token string, audiences ...string) authenticationv1.TokenReviewStatus {
		t.Helper()
		out, err := scheduler.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("TokenReview: %v", err)
		}
		return out.Status
	}

	t.Run("a service-account token is its service account's, for the apiserver's audience", func(t *testing.T) {
		st := review(t, tr.Status.Token)
		want := []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}
		if !st.Authenticated || st.User.Username != "system:serviceaccount:default:prometheus" || st.User.UID != string(sa.UID) ||
			!slices.Equal(st.User.Groups, want) || !slices.Equal(st.Audiences, []string{serviceaccount.DefaultIssuer}) || st.Error != "" {
			t.Errorf("status %+v, want system:serviceaccount:default:prometheus (uid %s) in %v for %s", st, sa.UID, want, serviceaccount.DefaultIssuer)
		}
	})
	t.Run("a review naming the apiserver's audience authenticates", func(t *testing.T) {
		if st := review(t, tr.Status.Token, "other", serviceaccount.DefaultIssuer); !st.Authenticated || !slices.Equal(st.Audiences, []string{serviceaccount.DefaultIssuer}) {
			t.Errorf("status %+v", st)
		}
	})
	t.Run("a review naming only other audiences does not", func(t *testing.T) {
		if st := review(t, tr.Status.Token, "vault"); st.Authenticated || st.Error == "" {
			t.Errorf("status %+v, want not authenticated with an error", st)
		}
	})
	t.Run("a bootstrap token is its bootstrap user's", func(t *testing.T) {
		st := review(t, s.BootstrapToken.String())
		if !st.Authenticated || st.User.Username != "system:bootstrap:"+s.BootstrapToken.ID || !slices.Contains(st.User.Groups, "system:bootstrappers") {
			t.Errorf("status %+v", st)
		}
	})
	t.Run("a forged token is nobody's, with the reason", func(t *testing.T) {
		for _, token := range []string{"not-a-token", tr.Status.Token + "x", s.BootstrapToken.ID + ".0000000000000000"} {
			if st := review(t, token); st.Authenticated || st.User.Username != "" || st.Error == "" {
				t.Errorf("token %.20q...: status %+v, want not authenticated with an error", token, st)
			}
		}
	})
	t.Run("a review without a token is refused", func(t *testing.T) {
		_, err := scheduler.Create(ctx, &authenticationv1.TokenReview{}, metav1.CreateOptions{})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("error %v, want 400", err)
		}
	})
	t.Run("a user without RBAC may not ask", func(t *testing.T) {
		nobody := clientFor(t, s.ClientConfig("nobody")).AuthenticationV1().TokenReviews()
		_, err := nobody.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: tr.Status.Token}}, metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("error %v, want 403", err)
		}
	})
}
