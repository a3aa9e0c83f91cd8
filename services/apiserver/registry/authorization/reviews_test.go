package authorization

import (
	"context"
	"errors"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// podReaders lets members of group "readers" get pods and lists jane's rules, with an
// evaluation error, so the reviews' mapping of each is visible.
type podReaders struct{}

func (podReaders) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for _, g := range a.GetUser().GetGroups() {
		if g == "readers" && a.GetResource() == "pods" && a.GetVerb() == "get" {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

func (podReaders) RulesFor(_ context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return []authorizer.ResourceRuleInfo{&authorizer.DefaultResourceRuleInfo{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"pods"}}},
		[]authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"get"}, NonResourceURLs: []string{"/api"}}},
		true, errors.New(`clusterrole.rbac.authorization.k8s.io "ghost" not found`)
}

func TestSelfSubjectRulesReview(t *testing.T) {
	r := &SelfSubjectRulesReviewREST{Resolver: podReaders{}}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "jane"})
	t.Run("lists the rules, incompleteness and errors of the namespace", func(t *testing.T) {
		out, err := r.Create(ctx, "", &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "ns"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		st := out.(*authorizationv1.SelfSubjectRulesReview).Status
		if len(st.ResourceRules) != 1 || st.ResourceRules[0].Resources[0] != "pods" || len(st.NonResourceRules) != 1 ||
			!st.Incomplete || st.EvaluationError == "" {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("without a namespace: 400", func(t *testing.T) {
		_, err := r.Create(ctx, "", &authorizationv1.SelfSubjectRulesReview{}, nil)
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("error %v", err)
		}
	})
}

func TestSubjectAccessReviews(t *testing.T) {
	getPods := &authorizationv1.ResourceAttributes{Namespace: "ns", Verb: "get", Resource: "pods"}
	sar := &SubjectAccessReviewREST{Authorizer: podReaders{}}
	lsar := &LocalSubjectAccessReviewREST{Authorizer: podReaders{}}
	cases := []struct {
		name        string
		create      func() (any, error)
		wantAllowed bool
		wantInvalid bool
	}{
		{"a SubjectAccessReview answers for the given groups", func() (any, error) {
			return sar.Create(context.Background(), "", &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "jane", Groups: []string{"readers"}, ResourceAttributes: getPods}}, &metav1.CreateOptions{})
		}, true, false},
		{"a SubjectAccessReview adds no group", func() (any, error) {
			return sar.Create(context.Background(), "", &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "jane", ResourceAttributes: getPods}}, &metav1.CreateOptions{})
		}, false, false},
		{"a SubjectAccessReview needs a user or group", func() (any, error) {
			return sar.Create(context.Background(), "", &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: getPods}}, nil)
		}, false, true},
		{"a SubjectAccessReview needs exactly one attribute set", func() (any, error) {
			return sar.Create(context.Background(), "", &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "jane"}}, nil)
		}, false, true},
		{"a LocalSubjectAccessReview answers in its namespace", func() (any, error) {
			return lsar.Create(context.Background(), "ns", &authorizationv1.LocalSubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				Groups: []string{"readers"}, ResourceAttributes: getPods}}, nil)
		}, true, false},
		{"a LocalSubjectAccessReview about another namespace is invalid", func() (any, error) {
			return lsar.Create(context.Background(), "other", &authorizationv1.LocalSubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				Groups: []string{"readers"}, ResourceAttributes: getPods}}, nil)
		}, false, true},
		{"a LocalSubjectAccessReview refuses nonResourceAttributes", func() (any, error) {
			return lsar.Create(context.Background(), "ns", &authorizationv1.LocalSubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "jane", NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: "/api"}}}, nil)
		}, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.create()
			if tc.wantInvalid {
				if !apierrors.IsInvalid(err) {
					t.Fatalf("error %v, want 422", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var allowed bool
			switch o := out.(type) {
			case *authorizationv1.SubjectAccessReview:
				allowed = o.Status.Allowed
			case *authorizationv1.LocalSubjectAccessReview:
				allowed = o.Status.Allowed
			}
			if allowed != tc.wantAllowed {
				t.Fatalf("allowed %v", allowed)
			}
		})
	}
}
