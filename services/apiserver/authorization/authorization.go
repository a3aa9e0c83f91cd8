// Package authorization decides whether a user may do what a request asks: the
// system:masters group may do anything; nodes follow Kubernetes' Node authorizer
// (k8s.io/kubernetes/plugin/pkg/auth/authorizer/node), tightened so a node reads only the
// pods bound to it; skiff's services and bootstrappers get fixed rules, the ones
// Kubernetes' bootstrap ClusterRoles give them (k8s.io/kubernetes/plugin/pkg/auth/
// authorizer/rbac/bootstrappolicy). Everything else is denied.
package authorization

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// Authorizer decides on one request's attributes; reason says why, for the 403 message.
// It is k8s.io/apiserver's UnconditionalAuthorizer.
type Authorizer interface {
	Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
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
}

// Identities of skiff's services and the groups the rules name (DESIGN.md "Identities").
const (
	MastersGroup       = user.SystemPrivilegedGroup // system:masters
	NodesGroup         = user.NodesGroup            // system:nodes
	NodeUserPrefix     = "system:node:"
	BootstrappersGroup = "system:bootstrappers"
	SchedulerUser      = user.KubeScheduler // system:kube-scheduler
	// ControllerManagerUser is kube-controller-manager.
	ControllerManagerUser = user.KubeControllerManager // system:kube-controller-manager
	CSRSignerUser         = "system:skiff:csr-signer"
	ExecProxyUser         = "system:skiff:exec-proxy"
)

// Verb groups as RBAC rules name them.
var (
	read  = []string{"get", "list", "watch"}
	write = []string{"create", "update", "patch"}
)

// rule allows verbs on resources ("resource" or "resource/subresource") of a group,
// as an RBAC PolicyRule does; "*" matches any verb.
type rule struct {
	group     string
	resources []string
	verbs     []string
}

func (r rule) allows(a authorizer.Attributes) bool {
	if !a.IsResourceRequest() || a.GetAPIGroup() != r.group {
		return false
	}
	res := a.GetResource()
	if sub := a.GetSubresource(); sub != "" {
		res += "/" + sub
	}
	return slices.Contains(r.resources, res) && (slices.Contains(r.verbs, "*") || slices.Contains(r.verbs, a.GetVerb()))
}

// everyone is what any authenticated user may do: ask who it is and what it may do
// (system:basic-user) and read discovery (system:discovery, system:public-info-viewer).
var everyone = []rule{
	{group: "authorization.k8s.io", resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}, verbs: []string{"create"}},
	{group: "authentication.k8s.io", resources: []string{"selfsubjectreviews"}, verbs: []string{"create"}},
}

// userRules are the fixed rules of skiff's service identities.
var userRules = map[string][]rule{
	// system:kube-scheduler: read pods and nodes, bind, report, elect a leader.
	SchedulerUser: {
		{group: "", resources: []string{"pods", "nodes", "namespaces"}, verbs: read},
		{group: "", resources: []string{"pods/binding", "bindings"}, verbs: []string{"create"}},
		{group: "", resources: []string{"pods/status"}, verbs: []string{"patch", "update"}},
		{group: "", resources: []string{"events"}, verbs: write},
		{group: "events.k8s.io", resources: []string{"events"}, verbs: write},
		{group: "coordination.k8s.io", resources: []string{"leases"}, verbs: append(slices.Clone(read), write...)},
	},
	// system:kube-controller-manager: what its controllers need (node lifecycle, taint
	// eviction, node IPAM, pod GC, workloads and the garbage collector), until these fixed
	// rules become bootstrap ClusterRoles (kube's system:kube-controller-manager role plus
	// the controllers' own roles, as with --use-service-account-credentials=false).
	ControllerManagerUser: {
		{group: "", resources: []string{"nodes", "pods"}, verbs: append(slices.Clone(read), "update", "patch", "delete")},
		{group: "", resources: []string{"nodes/status", "pods/status"}, verbs: []string{"update", "patch"}},
		{group: "", resources: []string{"pods"}, verbs: []string{"create"}},
		{group: "", resources: []string{"namespaces"}, verbs: read},
		{group: "", resources: []string{"events"}, verbs: write},
		{group: "events.k8s.io", resources: []string{"events"}, verbs: write},
		{group: "coordination.k8s.io", resources: []string{"leases"}, verbs: append(slices.Clone(read), write...)},
		{group: "apps", resources: []string{"replicasets", "deployments"}, verbs: []string{"*"}},
		{group: "apps", resources: []string{"replicasets/status", "deployments/status", "replicasets/finalizers", "deployments/finalizers"}, verbs: []string{"update", "patch"}},
		{group: "batch", resources: []string{"jobs", "cronjobs"}, verbs: []string{"*"}},
		{group: "batch", resources: []string{"jobs/status", "jobs/finalizers", "cronjobs/status", "cronjobs/finalizers"}, verbs: []string{"update", "patch"}},
	},
	// csr-signer: read CSRs, approve and sign them (system:controller:certificate-controller).
	CSRSignerUser: {
		{group: "certificates.k8s.io", resources: []string{"certificatesigningrequests"}, verbs: read},
		{group: "certificates.k8s.io", resources: []string{"certificatesigningrequests/approval", "certificatesigningrequests/status"}, verbs: []string{"update", "patch"}},
		{group: "", resources: []string{"nodes"}, verbs: read},
		{group: "", resources: []string{"events"}, verbs: write},
		{group: "events.k8s.io", resources: []string{"events"}, verbs: write},
		{group: "coordination.k8s.io", resources: []string{"leases"}, verbs: append(slices.Clone(read), write...)},
	},
	// exec-proxy: find a pod's node and that node's kubelet.
	ExecProxyUser: {
		{group: "", resources: []string{"pods", "nodes"}, verbs: read},
	},
}

// New is the apiserver's authorizer; lookup reads pods and CSRs for the node and
// bootstrapper rules.
func New(lookup Lookup) Authorizer { return &authz{lookup: lookup} }

type authz struct{ lookup Lookup }

// Authorize implements Authorizer. Non-resource requests (discovery, /version,
// /openapi) are allowed to every authenticated user.
func (z *authz) Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	u := a.GetUser()
	if u == nil {
		return authorizer.DecisionDeny, "no user", nil
	}
	groups := u.GetGroups()
	if slices.Contains(groups, MastersGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	if !slices.Contains(groups, user.AllAuthenticated) {
		return authorizer.DecisionDeny, "", nil
	}
	if !a.IsResourceRequest() {
		if a.GetVerb() == "get" || a.GetVerb() == "head" {
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionDeny, "", nil
	}
	for _, r := range everyone {
		if r.allows(a) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	if node, ok := NodeName(u); ok {
		return z.authorizeNode(ctx, node, a)
	}
	if slices.Contains(groups, BootstrappersGroup) {
		return z.authorizeBootstrapper(ctx, u, a)
	}
	for _, r := range userRules[u.GetName()] {
		if r.allows(a) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionDeny, "", nil
}

// NodeName is the node a user acts for: system:node:<name> in group system:nodes.
func NodeName(u user.Info) (string, bool) {
	name, ok := strings.CutPrefix(u.GetName(), NodeUserPrefix)
	if !ok || name == "" || !slices.Contains(u.GetGroups(), NodesGroup) {
		return "", false
	}
	return name, true
}

// authorizeBootstrapper lets a bootstrap token create CertificateSigningRequests and read
// the ones it created (kube's system:node-bootstrapper role, narrowed to its own).
func (z *authz) authorizeBootstrapper(ctx context.Context, u user.Info, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetAPIGroup() != "certificates.k8s.io" || a.GetResource() != "certificatesigningrequests" || a.GetSubresource() != "" {
		return authorizer.DecisionDeny, "", nil
	}
	switch a.GetVerb() {
	case "create":
		return authorizer.DecisionAllow, "", nil
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
	return authorizer.DecisionDeny, "", nil
}

func (z *authz) ownCSR(ctx context.Context, u user.Info, name string) (authorizer.Decision, string, error) {
	requester, found, err := z.lookup.CSRRequester(ctx, name, u.GetName())
	if err != nil {
		return authorizer.DecisionDeny, "", err
	}
	if !found || requester != u.GetName() {
		// An absent CSR is denied too, so a bootstrapper cannot probe others' names.
		return authorizer.DecisionDeny, "can only read its own certificatesigningrequests", nil
	}
	return authorizer.DecisionAllow, "", nil
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
