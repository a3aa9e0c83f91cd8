package authorization_test

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/apiserver/authorization"
)

// csrsBy is a Lookup whose pods are podsByNode's and whose CSRs were created by the
// users named.
type csrsBy struct {
	podsByNode
	requesters map[string]string
}

func (c csrsBy) CSRRequester(_ context.Context, name, _ string) (string, bool, error) {
	u, ok := c.requesters[name]
	return u, ok, nil
}

// rbacAllows is an RBAC authorizer that allows one verb and has a reason otherwise.
type rbacAllows struct{ verb string }

func (r rbacAllows) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetVerb() == r.verb {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "RBAC: role missing", nil
}

func (rbacAllows) RulesFor(context.Context, user.Info, string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return nil, nil, false, nil
}

func TestChain(t *testing.T) {
	lookup := csrsBy{podsByNode{"default/p1": {node: "n1"}, "default/p2": {node: "n2"}}, map[string]string{"mine": "system:bootstrap:abc", "theirs": "system:bootstrap:xyz"}}
	z := authorization.New(lookup, rbacAllows{verb: "get"})
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes"}}
	boot := &user.DefaultInfo{Name: "system:bootstrap:abc", Groups: []string{"system:bootstrappers"}}
	jane := &user.DefaultInfo{Name: "jane"}
	pod := func(u user.Info, verb, name string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Namespace: "default", Resource: "pods", Name: name, ResourceRequest: true}
	}
	csr := func(u user.Info, verb, name string, selector fields.Requirements) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "certificates.k8s.io", Resource: "certificatesigningrequests",
			Name: name, ResourceRequest: true, FieldSelectorRequirements: selector}
	}
	cases := []struct {
		name       string
		attrs      authorizer.AttributesRecord
		want       authorizer.Decision
		wantReason string
	}{
		{"system:masters may do anything", pod(admin, "delete", "p1"), authorizer.DecisionAllow, ""},
		{"the Node authorizer allows a node its own pod", pod(n1, "delete", "p1"), authorizer.DecisionAllow, ""},
		{"another node's pod: the Node authorizer's reason, then RBAC's", pod(n1, "delete", "p2"), authorizer.DecisionNoOpinion,
			"no relationship found between node 'n1' and this object\nRBAC: role missing"},
		{"RBAC may grant a node what the Node authorizer does not", pod(n1, "get", "p2"), authorizer.DecisionAllow, ""},
		{"RBAC decides for everyone else", pod(jane, "get", "p1"), authorizer.DecisionAllow, ""},
		{"nothing allows: no opinion, RBAC's reason", pod(jane, "list", ""), authorizer.DecisionNoOpinion, "RBAC: role missing"},
		{"a bootstrap token's own CSR is RBAC's to grant", csr(boot, "get", "mine", nil), authorizer.DecisionAllow, ""},
		{"a bootstrap token reading another's CSR is denied before RBAC", csr(boot, "get", "theirs", nil), authorizer.DecisionDeny, "can only read its own certificatesigningrequests"},
		{"a bootstrap token listing every CSR is denied before RBAC", csr(boot, "list", "", nil), authorizer.DecisionDeny,
			"can only list or watch its own certificatesigningrequests, selected by metadata.name"},
		{"a bootstrap token listing its own CSR by name is RBAC's to decide", csr(boot, "list", "", fields.Requirements{{Field: "metadata.name", Operator: "=", Value: "mine"}}),
			authorizer.DecisionNoOpinion, "RBAC: role missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := z.Authorize(context.Background(), tc.attrs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("decision %v reason %q, want %v %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

func TestChainRulesFor(t *testing.T) {
	z := authorization.New(podsByNode{}, rbacAllows{})
	t.Run("system:masters holds everything", func(t *testing.T) {
		res, nonRes, incomplete, err := z.RulesFor(context.Background(), &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, "default")
		if err != nil || incomplete || len(res) != 1 || res[0].GetVerbs()[0] != "*" || len(nonRes) != 1 {
			t.Fatalf("rules %v %v incomplete %v err %v", res, nonRes, incomplete, err)
		}
	})
	t.Run("a node's rules are incomplete", func(t *testing.T) {
		_, _, incomplete, err := z.RulesFor(context.Background(), &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes"}}, "default")
		if !incomplete || err == nil {
			t.Fatalf("incomplete %v err %v", incomplete, err)
		}
	})
}
