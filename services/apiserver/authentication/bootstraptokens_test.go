package authentication_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// TestBootstrapTokenFile walks one token file through the changes an admin makes and
// checks, after each, which tokens authenticate: the file is the only source of truth,
// so whatever leaves it (a token, the whole file, a readable file) stops authenticating
// at the next request.
func TestBootstrapTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), pki.BootstrapTokenFile)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a := &authentication.BootstrapTokens{Path: path, Now: func() time.Time { return now }}
	const first, second = "aaaaaa.0123456789abcdef", "bbbbbb.0123456789abcdef"
	tokens := []pki.BootstrapToken{{ID: "aaaaaa", Secret: "0123456789abcdef"}, {ID: "bbbbbb", Secret: "0123456789abcdef", Expiration: now.Add(time.Hour)}}
	authenticates := func(token string) (bool, error) {
		r := httptest.NewRequest("GET", "/api", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		info, ok, err := a.AuthenticateRequest(r)
		if ok {
			id, _, _ := pki.ParseBootstrapToken(token)
			if info.GetName() != authentication.BootstrapUserPrefix+id || !slices.Contains(info.GetGroups(), authentication.BootstrapGroup) {
				t.Fatalf("%s authenticated as %v", token, info)
			}
		}
		return ok, err
	}
	steps := []struct {
		name   string
		change func(t *testing.T)
		want   map[string]bool
	}{
		{"both tokens of the file authenticate", func(t *testing.T) {
			if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens(tokens), 0o600); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: true, second: true}},
		{"a token past its expiration does not", func(*testing.T) { now = now.Add(time.Hour) }, map[string]bool{first: true, second: false}},
		{"a token removed from the file does not", func(t *testing.T) {
			if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens(tokens[1:]), 0o600); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: false, second: false}},
		{"a file put back authenticates again", func(t *testing.T) {
			if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens(tokens[:1]), 0o600); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: true}},
		{"a deleted file revokes every token it held", func(t *testing.T) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: false}},
		{"a file recreated authenticates again", func(t *testing.T) {
			if err := pki.WriteFileAtomic(path, pki.FormatBootstrapTokens(tokens[:1]), 0o600); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: true}},
		{"a file that does not parse authenticates no token, not the last good one", func(t *testing.T) {
			if err := os.WriteFile(path, append(pki.FormatBootstrapTokens(tokens[:1]), "not a token\n"...), 0o600); err != nil {
				t.Fatal(err)
			}
		}, map[string]bool{first: false}},
	}
	for _, step := range steps {
		step.change(t)
		for token, want := range step.want {
			ok, err := authenticates(token)
			if ok != want {
				t.Fatalf("%s: %s authenticates = %v (%v), want %v", step.name, token, ok, err, want)
			}
			if !ok && err == nil {
				t.Fatalf("%s: %s refused without an error, so the request would go on as anonymous", step.name, token)
			}
		}
	}
}

// TestDeletedBootstrapTokenFileIs401 runs the real apiserver: its bootstrap token
// authenticates until the token file is deleted, and then gets 401.
func TestDeletedBootstrapTokenFileIs401(t *testing.T) {
	s := controlplanetest.StartServerWithoutControllers(t)
	client := kubernetes.NewForConfigOrDie(s.TokenConfig(s.BootstrapToken.String()))
	review := func() (*authenticationv1.SelfSubjectReview, error) {
		return client.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	got, err := review()
	if err != nil {
		t.Fatal(err)
	}
	if want := authentication.BootstrapUserPrefix + s.BootstrapToken.ID; got.Status.UserInfo.Username != want {
		t.Fatalf("authenticated as %q, want %q", got.Status.UserInfo.Username, want)
	}
	if err := os.Remove(filepath.Join(s.PKIDir, pki.BootstrapTokenFile)); err != nil {
		t.Fatal(err)
	}
	_, err = review()
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("after the token file was deleted: %v, want 401", err)
	}
}
