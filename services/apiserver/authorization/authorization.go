// Package authorization decides whether a user may do what a request asks, as
// kube-apiserver's --authorization-mode=Node,RBAC does: the system:masters group may do
// anything; then kube's Node authorizer (k8s.io/kubernetes/plugin/pkg/auth/authorizer/
// node), tightened so a node reads only the pods bound to it; then RBAC (package rbac),
// whose bootstrap policy (package rbac/bootstrappolicy) holds what skiff's services and
// bootstrap tokens may do. A request no authorizer allows is denied.
package authorization

import (
	"context"
	"errors"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Authorizer decides on one request's attributes; reason says why, for the 403 message.
// It is k8s.io/apiserver's UnconditionalAuthorizer.
type Authorizer interface {
	Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
}

// RuleAuthorizer is an Authorizer that can also list what a user may do
// (authorizer.RuleResolver), for SelfSubjectRulesReview.
type RuleAuthorizer interface {
	Authorizer
	authorizer.RuleResolver
}

// Lookup reads what the node and bootstrapper rules depend on, straight from storage.
type Lookup interface {
	// PodNodeName is spec.nodeName of pod namespace/name; found is false when it does not
	// exist. asking is the node that asks, so a lookup that answers from a cache can
	// confirm a surprising answer before it is used to deny.
	PodNodeName(ctx context.Context, namespace, name, asking string) (nodeName string, found bool, err error)
	// CSRRequester is spec.username of CertificateSigningRequest name; asking is the
	// user that asks.
	CSRRequester(ctx context.Context, name, asking string) (username string, found bool, err error)
	// NodeRunsServiceAccount reports whether a pod bound to node in namespace runs as
	// service account name.
	NodeRunsServiceAccount(ctx context.Context, namespace, name, node string) (bool, error)
	// NodePodsUse reports whether a pod bound to node in namespace satisfies uses (it
	// refers to some object); a lookup that answers from a cache confirms a no before
	// it is used to deny.
	NodePodsUse(ctx context.Context, namespace, node string, uses func(*corev1.Pod) bool) (bool, error)
	// PersistentVolumeClaimRef is the namespace and name of the claim PersistentVolume
	// name's spec.claimRef names; found is false when the volume does not exist or names
	// no claim.
	PersistentVolumeClaimRef(ctx context.Context, name string) (namespace, claim string, found bool, err error)
	// VolumeAttachmentNodeName is spec.nodeName of VolumeAttachment name; found is false
	// when it does not exist. asking is the node that asks.
	VolumeAttachmentNodeName(ctx context.Context, name, asking string) (nodeName string, found bool, err error)
}

// Identities and groups the authorizers single out.
const (
	MastersGroup       = user.SystemPrivilegedGroup // system:masters
	NodesGroup         = user.NodesGroup            // system:nodes
	NodeUserPrefix     = "system:node:"
	BootstrappersGroup = "system:bootstrappers"
)

// Verb groups as RBAC rules name them.
var (
	read  = []string{"get", "list", "watch"}
	write = []string{"create", "update", "patch"}
)

// New is the apiserver's authorizer: system:masters, then the Node authorizer (lookup
// reads pods for it), then the bootstrap tokens' narrowing (lookup reads CSRs), then
// rbac.
func New(lookup Lookup, rbac RuleAuthorizer) RuleAuthorizer {
	return &chain{lookup: lookup, rbac: rbac}
}

type chain struct {
	lookup Lookup
	rbac   RuleAuthorizer
}

// Authorize asks each authorizer in turn: the first to allow or deny decides; when none
// does, the request is denied with their reasons, one per line. Mirrors
// k8s.io/apiserver/pkg/authorization/union.
func (z *chain) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	if slices.Contains(u.GetGroups(), MastersGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	var reasons []string
	var errs []error
	for _, step := range []func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error){
		z.authorizeNode, z.authorizeBootstrapper, z.rbac.Authorize,
	} {
		decision, reason, err := step(ctx, a)
		if err != nil {
			errs = append(errs, err)
		}
		if reason != "" {
			reasons = append(reasons, reason)
		}
		if decision != authorizer.DecisionNoOpinion {
			return decision, reason, err
		}
	}
	return authorizer.DecisionNoOpinion, strings.Join(reasons, "\n"), utilerrors.NewAggregate(errs)
}

// RulesFor lists what u may do in namespace: everything for system:masters; for a node,
// an incomplete list (the Node authorizer's rules depend on each object, as kube's
// cannot be listed either); otherwise its RBAC rules.
func (z *chain) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	if slices.Contains(u.GetGroups(), MastersGroup) {
		return []authorizer.ResourceRuleInfo{&authorizer.DefaultResourceRuleInfo{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			[]authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, false, nil
	}
	resources, nonResources, incomplete, err := z.rbac.RulesFor(ctx, u, namespace)
	if _, ok := NodeName(u); ok {
		incomplete = true
		err = utilerrors.NewAggregate([]error{errors.New("node authorizer does not support user rule resolution"), err})
	}
	return resources, nonResources, incomplete, err
}

// NodeName is the node a user acts for: system:node:<name> in group system:nodes.
func NodeName(u user.Info) (string, bool) {
	name, ok := strings.CutPrefix(u.GetName(), NodeUserPrefix)
	if !ok || name == "" || !slices.Contains(u.GetGroups(), NodesGroup) {
		return "", false
	}
	return name, true
}

// authorizeBootstrapper narrows what RBAC's system:node-bootstrapper role grants a
// bootstrap token (create, get, list and watch any CSR): it may read only the requests
// it created itself, so one joining node cannot read another's. It denies such a read of
// another's request and has no opinion on anything else. skiff's tightening; kube's
// bootstrap tokens read every CSR.
func (z *chain) authorizeBootstrapper(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if !slices.Contains(u.GetGroups(), BootstrappersGroup) || a.GetAPIGroup() != "certificates.k8s.io" ||
		a.GetResource() != "certificatesigningrequests" || a.GetSubresource() != "" {
		return authorizer.DecisionNoOpinion, "", nil
	}
	switch a.GetVerb() {
	case "get":
		return z.ownCSR(ctx, u, a.GetName())
	case "list", "watch":
		// client-go's csr.WaitForCertificate lists and watches with metadata.name=<csr>.
		name, ok := fieldValue(a, "metadata.name")
		if !ok {
			return authorizer.DecisionDeny, "can only list or watch its own certificatesigningrequests, selected by metadata.name", nil
		}
		return z.ownCSR(ctx, u, name)
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// ownCSR has no opinion on a read of the bootstrapper's own request (RBAC decides) and
// denies any other.
func (z *chain) ownCSR(ctx context.Context, u user.Info, name string) (authorizer.Decision, string, error) {
	requester, found, err := z.lookup.CSRRequester(ctx, name, u.GetName())
	if err != nil {
		return authorizer.DecisionDeny, "", err
	}
	if !found || requester != u.GetName() {
		// An absent CSR is denied too, so a bootstrapper cannot probe others' names.
		return authorizer.DecisionDeny, "can only read its own certificatesigningrequests", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// fieldValue is the value an "=" or "==" requirement of a's field selector sets for
// field.
func fieldValue(a authorizer.Attributes, field string) (string, bool) {
	reqs, err := a.GetFieldSelector()
	if err != nil {
		return "", false
	}
	for _, r := range reqs {
		if r.Field == field && (r.Operator == "=" || r.Operator == "==") {
			return r.Value, true
		}
	}
	return "", false
}

// ParseFieldSelector turns a raw fieldSelector into the requirements authorizers read.
func ParseFieldSelector(raw string) (fields.Requirements, error) {
	if raw == "" {
		return nil, nil
	}
	sel, err := fields.ParseSelector(raw)
	if err != nil {
		return nil, err
	}
	return sel.Requirements(), nil
}

// ForbiddenMessage is kube-apiserver's 403 message for a (responsewriters.forbiddenMessage),
// e.g. `User "system:node:a" cannot get resource "pods" in API group "" in the namespace
// "default"`, with ": <reason>" appended when the authorizer gave one.
func ForbiddenMessage(a authorizer.Attributes, reason string) string {
	name := ""
	if u := a.GetUser(); u != nil {
		name = u.GetName()
	}
	var msg string
	switch {
	case !a.IsResourceRequest():
		msg = fmt.Sprintf("User %q cannot %s path %q", name, a.GetVerb(), a.GetPath())
	default:
		resource := a.GetResource()
		if sub := a.GetSubresource(); sub != "" {
			resource += "/" + sub
		}
		if ns := a.GetNamespace(); ns != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", name, a.GetVerb(), resource, a.GetAPIGroup(), ns)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", name, a.GetVerb(), resource, a.GetAPIGroup())
		}
	}
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}
