// Package bootstrappolicy is the RBAC policy every skiff cluster starts with: kube's
// default ClusterRoles and ClusterRoleBindings under kube's names (cluster-admin bound to
// system:masters; admin, edit and view aggregated by label; system:basic-user,
// system:discovery, system:public-info-viewer for everyone; the scheduler's, the
// controller-manager's and its controllers' roles), kubeadm's bootstrap-token bindings,
// skiff's own identities (csr-signer, exec-proxy), and kube's kube-system Role
// extension-apiserver-authentication-reader. The apiserver reconciles it at
// start (Reconcile). Mirrors k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/
// bootstrappolicy and kubeadm's phases/bootstraptoken/node.
package bootstrappolicy

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
)

// Verb sets as kube's policy names them.
var (
	Read      = []string{"get", "list", "watch"}
	Write     = []string{"create", "update", "patch", "delete", "deletecollection"}
	ReadWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
)

// Label and Annotation mark every object of the policy, as kube's do.
var (
	Label      = map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}
	Annotation = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
)

// Aggregation labels of admin, edit and view.
const (
	AggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	AggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	AggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

// Identities the policy binds.
const (
	BootstrappersGroup = "system:bootstrappers"
	CSRSignerUser      = "system:skiff:csr-signer"
	ExecProxyUser      = "system:skiff:exec-proxy"
	// CoreDNSUser is cluster DNS's identity (pki.CoreDNS); kubeadm binds
	// system:coredns to the kube-system/coredns service account, skiff to both.
	CoreDNSUser             = "system:coredns"
	KubeProxyUser           = user.KubeProxy             // system:kube-proxy
	ControllerManagerUser   = user.KubeControllerManager // system:kube-controller-manager
	SchedulerUser           = user.KubeScheduler         // system:kube-scheduler
	MonitoringGroup         = user.MonitoringGroup       // system:monitoring
	controllerRolePrefix    = "system:controller:"
	nodeBootstrapperRole    = "system:node-bootstrapper"
	nodeClientRole          = "system:certificates.k8s.io:certificatesigningrequests:nodeclient"
	selfNodeClientRole      = "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"
	controllerNamespace     = "kube-system"
	legacyGroup             = ""
	appsGroup               = "apps"
	authenticationGroup     = "authentication.k8s.io"
	authorizationGroup      = "authorization.k8s.io"
	autoscalingGroup        = "autoscaling"
	batchGroup              = "batch"
	certificatesGroup       = "certificates.k8s.io"
	coordinationGroup       = "coordination.k8s.io"
	discoveryGroup          = "discovery.k8s.io"
	eventsGroup             = "events.k8s.io"
	extensionsGroup         = "extensions"
	networkingGroup         = "networking.k8s.io"
	policyGroup             = "policy"
	rbacGroup               = rbacv1.GroupName
	storageGroup            = "storage.k8s.io"
	nodeGroup               = "node.k8s.io"
	schedulerLeaseName      = "kube-scheduler"
	controllerManagerLease  = "kube-controller-manager"
	selfSubjectReviewsGroup = authenticationGroup
	// The signers csr-signer approves and signs for (certificates/v1's signer names).
	kubeAPIServerClientSigner        = "kubernetes.io/kube-apiserver-client"
	kubeAPIServerClientKubeletSigner = "kubernetes.io/kube-apiserver-client-kubelet"
	kubeletServingSigner             = "kubernetes.io/kubelet-serving"
)

// rule builds a PolicyRule: rule(verbs...).groups(...).resources(...).
type ruleBuilder struct{ r rbacv1.PolicyRule }

func rule(verbs ...string) *ruleBuilder { return &ruleBuilder{rbacv1.PolicyRule{Verbs: verbs}} }

func (b *ruleBuilder) groups(g ...string) *ruleBuilder    { b.r.APIGroups = g; return b }
func (b *ruleBuilder) resources(r ...string) *ruleBuilder { b.r.Resources = r; return b }
func (b *ruleBuilder) names(n ...string) *ruleBuilder     { b.r.ResourceNames = n; return b }
func (b *ruleBuilder) urls(u ...string) rbacv1.PolicyRule { b.r.NonResourceURLs = u; return b.r }
func (b *ruleBuilder) done() rbacv1.PolicyRule            { return b.r }

func eventsRule() rbacv1.PolicyRule {
	return rule("create", "update", "patch").groups(legacyGroup, eventsGroup).resources("events").done()
}

func clusterRole(name string, labels map[string]string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Rules: rules}
}

func aggregated(name string, labels map[string]string, selectLabel string) rbacv1.ClusterRole {
	r := clusterRole(name, labels)
	r.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{selectLabel: "true"}}}}
	return r
}

func labelled(key string) map[string]string { return map[string]string{key: "true"} }

// ClusterRoles is the policy's ClusterRoles, each with Label and Annotation.
func ClusterRoles() []rbacv1.ClusterRole {
	roles := []rbacv1.ClusterRole{
		clusterRole("cluster-admin", nil,
			rule("*").groups("*").resources("*").done(),
			rule("*").urls("*")),
		clusterRole("system:discovery", nil,
			rule("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*")),
		clusterRole("system:monitoring", nil,
			rule("get").urls("/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*")),
		clusterRole("system:basic-user", nil,
			rule("create").groups(authorizationGroup).resources("selfsubjectaccessreviews", "selfsubjectrulesreviews").done(),
			rule("create").groups(selfSubjectReviewsGroup).resources("selfsubjectreviews").done()),
		clusterRole("system:public-info-viewer", nil,
			rule("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/")),
		aggregated("admin", nil, AggregateToAdmin),
		aggregated("edit", labelled(AggregateToAdmin), AggregateToEdit),
		aggregated("view", labelled(AggregateToEdit), AggregateToView),
		clusterRole("system:aggregate-to-admin", labelled(AggregateToAdmin),
			rule("create").groups(authorizationGroup).resources("localsubjectaccessreviews").done(),
			rule(ReadWrite...).groups(rbacGroup).resources("roles", "rolebindings").done()),
		clusterRole("system:aggregate-to-edit", labelled(AggregateToEdit),
			rule(Read...).groups(legacyGroup).resources("pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy").done(),
			rule("impersonate").groups(legacyGroup).resources("serviceaccounts").done(),
			rule(Write...).groups(legacyGroup).resources("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward").done(),
			rule("create").groups(legacyGroup).resources("pods/eviction").done(),
			rule(Write...).groups(legacyGroup).resources("replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events").done(),
			rule("create").groups(legacyGroup).resources("serviceaccounts/token").done(),
			rule(Write...).groups(appsGroup).resources("statefulsets", "statefulsets/scale", "daemonsets",
				"deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale").done(),
			rule(Write...).groups(autoscalingGroup).resources("horizontalpodautoscalers").done(),
			rule(Write...).groups(batchGroup).resources("jobs", "cronjobs").done(),
			rule(Write...).groups(extensionsGroup).resources("daemonsets", "deployments", "deployments/scale", "deployments/rollback",
				"ingresses", "replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies").done(),
			rule(Write...).groups(policyGroup).resources("poddisruptionbudgets").done(),
			rule(Write...).groups(networkingGroup).resources("networkpolicies", "ingresses").done(),
			rule(ReadWrite...).groups(coordinationGroup).resources("leases").done()),
		clusterRole("system:aggregate-to-view", labelled(AggregateToView),
			rule(Read...).groups(legacyGroup).resources("pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
				"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps").done(),
			rule(Read...).groups(legacyGroup).resources("limitranges", "resourcequotas", "bindings", "events",
				"pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log").done(),
			rule(Read...).groups(legacyGroup).resources("namespaces").done(),
			rule(Read...).groups(discoveryGroup).resources("endpointslices").done(),
			rule(Read...).groups(appsGroup).resources("controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
				"daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale",
				"replicasets", "replicasets/status", "replicasets/scale").done(),
			rule(Read...).groups(autoscalingGroup).resources("horizontalpodautoscalers", "horizontalpodautoscalers/status").done(),
			rule(Read...).groups(batchGroup).resources("jobs", "jobs/status", "cronjobs", "cronjobs/status").done(),
			rule(Read...).groups(extensionsGroup).resources("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
				"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale", "networkpolicies").done(),
			rule(Read...).groups(policyGroup).resources("poddisruptionbudgets", "poddisruptionbudgets/status").done(),
			rule(Read...).groups(networkingGroup).resources("ingresses", "ingresses/status", "networkpolicies").done()),
		clusterRole("system:service-account-issuer-discovery", nil,
			rule("get").urls("/.well-known/openid-configuration", "/openid/v1/jwks")),
		clusterRole("system:auth-delegator", nil,
			rule("create").groups(authenticationGroup).resources("tokenreviews").done(),
			rule("create").groups(authorizationGroup).resources("subjectaccessreviews").done()),
		// kube's node rules; like kube, the system:node binding has no subjects: nodes are
		// authorized by the Node authorizer.
		clusterRole("system:node", nil,
			rule("create").groups(authenticationGroup).resources("tokenreviews").done(),
			rule("create").groups(authorizationGroup).resources("subjectaccessreviews", "localsubjectaccessreviews").done(),
			rule(Read...).groups(legacyGroup).resources("services").done(),
			rule("create", "get", "list", "watch").groups(legacyGroup).resources("nodes").done(),
			rule("update", "patch").groups(legacyGroup).resources("nodes/status").done(),
			rule("update", "patch").groups(legacyGroup).resources("nodes").done(),
			rule("create", "update", "patch").groups(legacyGroup).resources("events").done(),
			rule(Read...).groups(legacyGroup).resources("pods").done(),
			rule("create", "delete").groups(legacyGroup).resources("pods").done(),
			rule("update", "patch").groups(legacyGroup).resources("pods/status").done(),
			rule("create").groups(legacyGroup).resources("pods/eviction").done(),
			rule(Read...).groups(legacyGroup).resources("secrets", "configmaps").done(),
			rule("get").groups(legacyGroup).resources("persistentvolumeclaims", "persistentvolumes").done(),
			rule("get").groups(legacyGroup).resources("endpoints").done(),
			rule("create", "get", "list", "watch").groups(certificatesGroup).resources("certificatesigningrequests").done(),
			rule("get", "create", "update", "patch", "delete").groups(coordinationGroup).resources("leases").done(),
			rule("get").groups(storageGroup).resources("volumeattachments").done(),
			rule("create").groups(legacyGroup).resources("serviceaccounts/token").done(),
			rule("get", "update", "patch").groups(legacyGroup).resources("persistentvolumeclaims/status").done(),
			rule(Read...).groups(storageGroup).resources("csidrivers").done(),
			rule("get", "create", "update", "patch", "delete").groups(storageGroup).resources("csinodes").done(),
			rule(Read...).groups(nodeGroup).resources("runtimeclasses").done()),
		clusterRole("system:node-proxier", nil,
			rule("list", "watch").groups(legacyGroup).resources("services", "endpoints").done(),
			rule(Read...).groups(legacyGroup).resources("nodes").done(),
			eventsRule(),
			rule("list", "watch").groups(discoveryGroup).resources("endpointslices").done()),
		clusterRole(nodeBootstrapperRole, nil,
			rule("create", "get", "list", "watch").groups(certificatesGroup).resources("certificatesigningrequests").done()),
		clusterRole(nodeClientRole, nil,
			rule("create").groups(certificatesGroup).resources("certificatesigningrequests/nodeclient").done()),
		clusterRole(selfNodeClientRole, nil,
			rule("create").groups(certificatesGroup).resources("certificatesigningrequests/selfnodeclient").done()),
		// kube's system:kube-scheduler: delete on pods is preemption's.
		clusterRole("system:kube-scheduler", nil,
			eventsRule(),
			rule("create").groups(coordinationGroup).resources("leases").done(),
			rule("get", "update").groups(coordinationGroup).resources("leases").names(schedulerLeaseName).done(),
			rule(Read...).groups(legacyGroup).resources("nodes").done(),
			rule("delete", "get", "list", "watch").groups(legacyGroup).resources("pods").done(),
			rule("create").groups(legacyGroup).resources("pods/binding", "bindings").done(),
			rule("patch", "update").groups(legacyGroup).resources("pods/status").done(),
			rule(Read...).groups(legacyGroup).resources("replicationcontrollers", "services").done(),
			rule(Read...).groups(appsGroup, extensionsGroup).resources("replicasets").done(),
			rule(Read...).groups(appsGroup).resources("statefulsets").done(),
			rule(Read...).groups(policyGroup).resources("poddisruptionbudgets").done(),
			rule(Read...).groups(legacyGroup).resources("persistentvolumeclaims", "persistentvolumes").done(),
			rule("create").groups(authenticationGroup).resources("tokenreviews").done(),
			rule("create").groups(authorizationGroup).resources("subjectaccessreviews").done(),
			rule(Read...).groups(storageGroup).resources("csinodes").done(),
			rule(Read...).groups(legacyGroup).resources("namespaces").done(),
			rule(Read...).groups(storageGroup).resources("csidrivers").done(),
			rule(Read...).groups(storageGroup).resources("csistoragecapacities").done()),
		// kube's system:volume-scheduler: the scheduler's VolumeBinding binds a claim to
		// a volume (the volume's claimRef) or asks for provisioning (the claim's
		// selected-node annotation).
		clusterRole("system:volume-scheduler", nil,
			rule("get", "list", "watch", "update", "patch").groups(legacyGroup).resources("persistentvolumes").done(),
			rule(Read...).groups(storageGroup).resources("storageclasses").done(),
			rule("get", "list", "watch", "update", "patch").groups(legacyGroup).resources("persistentvolumeclaims").done()),
		clusterRole("system:kube-controller-manager", nil,
			eventsRule(),
			rule("create").groups(coordinationGroup).resources("leases").done(),
			rule("get", "update").groups(coordinationGroup).resources("leases").names(controllerManagerLease).done(),
			rule("create").groups(legacyGroup).resources("secrets", "serviceaccounts").done(),
			rule("delete").groups(legacyGroup).resources("secrets").done(),
			rule("get").groups(legacyGroup).resources("configmaps", "namespaces", "secrets", "serviceaccounts").done(),
			rule("update").groups(legacyGroup).resources("secrets", "serviceaccounts").done(),
			rule("create").groups(authenticationGroup).resources("tokenreviews").done(),
			rule("create").groups(authorizationGroup).resources("subjectaccessreviews").done(),
			rule("list", "watch").groups("*").resources("*").done(),
			rule("create").groups(legacyGroup).resources("serviceaccounts/token").done()),
		// skiff's csr-signer approves and signs kubelet certificates (kube's
		// certificate-controller's job: the same signers it may approve and sign for),
		// reports events, and asks the apiserver who calls its secure port and whether
		// they may (TokenReview, SubjectAccessReview), as kube-controller-manager, where
		// that job lives, does.
		clusterRole(CSRSignerUser, nil,
			rule(Read...).groups(certificatesGroup).resources("certificatesigningrequests").done(),
			rule("update", "patch").groups(certificatesGroup).resources("certificatesigningrequests/approval", "certificatesigningrequests/status").done(),
			rule("approve").groups(certificatesGroup).resources("signers").names(kubeAPIServerClientKubeletSigner, kubeletServingSigner).done(),
			rule("sign").groups(certificatesGroup).resources("signers").names(kubeAPIServerClientSigner, kubeAPIServerClientKubeletSigner, kubeletServingSigner).done(),
			rule(Read...).groups(legacyGroup).resources("nodes").done(),
			eventsRule(),
			rule("get", "list", "watch", "create", "update", "patch").groups(coordinationGroup).resources("leases").done(),
			rule("create").groups(authenticationGroup).resources("tokenreviews").done(),
			rule("create").groups(authorizationGroup).resources("subjectaccessreviews").done()),
		// skiff's exec-proxy finds a pod's node and that node's kubelet.
		clusterRole(ExecProxyUser, nil,
			rule(Read...).groups(legacyGroup).resources("pods", "nodes").done()),
		// kubeadm's CoreDNS addon role (cmd/kubeadm/app/phases/addons/dns): what
		// CoreDNS's kubernetes plugin lists and watches.
		clusterRole("system:coredns", nil,
			rule("list", "watch").groups(legacyGroup).resources("endpoints", "services", "pods", "namespaces").done(),
			rule("list", "watch").groups(discoveryGroup).resources("endpointslices").done()),
	}
	roles = append(roles, controllerRoles()...)
	for i := range roles {
		addDefaultMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// controllerRoles are kube's system:controller:<name> roles of the controllers skiff's
// controller-manager runs.
func controllerRoles() []rbacv1.ClusterRole {
	c := func(name string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
		return clusterRole(controllerRolePrefix+name, nil, rules...)
	}
	return []rbacv1.ClusterRole{
		// Full rights on clusterroles, so it may write aggregated rules without the
		// escalation check.
		c("clusterrole-aggregation-controller",
			rule("escalate", "get", "list", "watch", "update", "patch").groups(rbacGroup).resources("clusterroles").done()),
		c("cronjob-controller",
			rule("get", "list", "watch", "update").groups(batchGroup).resources("cronjobs").done(),
			rule("get", "list", "watch", "create", "update", "delete", "patch").groups(batchGroup).resources("jobs").done(),
			rule("update").groups(batchGroup).resources("cronjobs/status").done(),
			rule("update").groups(batchGroup).resources("cronjobs/finalizers").done(),
			rule("list", "delete").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("daemon-set-controller",
			rule("get", "list", "watch").groups(extensionsGroup, appsGroup).resources("daemonsets").done(),
			rule("update").groups(extensionsGroup, appsGroup).resources("daemonsets/status").done(),
			rule("update").groups(extensionsGroup, appsGroup).resources("daemonsets/finalizers").done(),
			rule("list", "watch").groups(legacyGroup).resources("nodes").done(),
			rule("list", "watch", "create", "delete", "patch").groups(legacyGroup).resources("pods").done(),
			rule("create").groups(legacyGroup).resources("pods/binding").done(),
			rule("get", "list", "watch", "create", "delete", "update", "patch").groups(appsGroup).resources("controllerrevisions").done(),
			eventsRule()),
		c("deployment-controller",
			rule("get", "list", "watch", "update").groups(extensionsGroup, appsGroup).resources("deployments").done(),
			rule("update").groups(extensionsGroup, appsGroup).resources("deployments/status").done(),
			rule("update").groups(extensionsGroup, appsGroup).resources("deployments/finalizers").done(),
			rule("get", "list", "watch", "create", "update", "patch", "delete").groups(appsGroup, extensionsGroup).resources("replicasets").done(),
			rule("get", "list", "watch", "update").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("disruption-controller",
			rule(Read...).groups(extensionsGroup, appsGroup).resources("deployments").done(),
			rule(Read...).groups(appsGroup, extensionsGroup).resources("replicasets").done(),
			rule(Read...).groups(legacyGroup).resources("replicationcontrollers").done(),
			rule(Read...).groups(policyGroup).resources("poddisruptionbudgets").done(),
			rule(Read...).groups(appsGroup).resources("statefulsets").done(),
			rule("update").groups(policyGroup).resources("poddisruptionbudgets/status").done(),
			rule("patch", "update").groups(legacyGroup).resources("pods/status").done(),
			rule("get").groups("*").resources("*/scale").done(),
			eventsRule()),
		c("endpoint-controller",
			rule(Read...).groups(legacyGroup).resources("services", "pods").done(),
			rule("get", "list", "create", "update", "delete").groups(legacyGroup).resources("endpoints").done(),
			rule("create").groups(legacyGroup).resources("endpoints/restricted").done(),
			eventsRule()),
		c("endpointslice-controller",
			rule(Read...).groups(legacyGroup).resources("services", "pods", "nodes").done(),
			rule("update").groups(legacyGroup).resources("services/finalizers").done(),
			rule("get", "list", "watch", "create", "update", "delete").groups(discoveryGroup).resources("endpointslices").done(),
			eventsRule()),
		// Updates on the owners' finalizers let it set blockOwnerDeletion on the slices'
		// ownerReferences to their Endpoints.
		c("endpointslicemirroring-controller",
			rule(Read...).groups(legacyGroup).resources("services", "endpoints").done(),
			rule("update").groups(legacyGroup).resources("services/finalizers").done(),
			rule("update").groups(legacyGroup).resources("endpoints/finalizers").done(),
			rule("get", "list", "watch", "create", "update", "delete").groups(discoveryGroup).resources("endpointslices").done(),
			eventsRule()),
		c("generic-garbage-collector",
			rule("get", "list", "watch", "patch", "update", "delete").groups("*").resources("*").done(),
			eventsRule()),
		// Reads resource, custom and external metrics through their aggregated APIs.
		c("horizontal-pod-autoscaler",
			rule(Read...).groups(autoscalingGroup).resources("horizontalpodautoscalers").done(),
			rule("update").groups(autoscalingGroup).resources("horizontalpodautoscalers/status").done(),
			rule("get", "update").groups("*").resources("*/scale").done(),
			rule("list", "watch").groups(legacyGroup).resources("pods").done(),
			rule("list", "watch").groups("metrics.k8s.io").resources("pods").done(),
			rule(Read...).groups("custom.metrics.k8s.io").resources("*").done(),
			rule(Read...).groups("external.metrics.k8s.io").resources("*").done(),
			eventsRule()),
		c("job-controller",
			rule("get", "list", "watch", "update", "patch").groups(batchGroup).resources("jobs").done(),
			rule("update").groups(batchGroup).resources("jobs/status").done(),
			rule("update").groups(batchGroup).resources("jobs/finalizers").done(),
			rule("list", "watch", "create", "delete", "patch").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("namespace-controller",
			rule("get", "list", "watch", "delete").groups(legacyGroup).resources("namespaces").done(),
			rule("update").groups(legacyGroup).resources("namespaces/finalize", "namespaces/status").done(),
			rule("get", "list", "watch", "delete", "deletecollection").groups("*").resources("*").done()),
		c("node-controller",
			rule("get", "list", "watch", "update", "delete", "patch").groups(legacyGroup).resources("nodes").done(),
			rule("patch", "update").groups(legacyGroup).resources("nodes/status").done(),
			rule("patch", "update").groups(legacyGroup).resources("pods/status").done(),
			rule("list", "watch", "get", "delete").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("pod-garbage-collector",
			rule("list", "watch", "delete").groups(legacyGroup).resources("pods").done(),
			rule(Read...).groups(legacyGroup).resources("nodes").done(),
			rule("patch").groups(legacyGroup).resources("pods/status").done()),
		c("replicaset-controller",
			rule("get", "list", "watch", "update").groups(appsGroup, extensionsGroup).resources("replicasets").done(),
			rule("update").groups(appsGroup, extensionsGroup).resources("replicasets/status").done(),
			rule("update").groups(appsGroup, extensionsGroup).resources("replicasets/finalizers").done(),
			rule("list", "watch", "patch", "create", "delete").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("replication-controller",
			rule("get", "list", "watch", "update").groups(legacyGroup).resources("replicationcontrollers").done(),
			rule("update").groups(legacyGroup).resources("replicationcontrollers/status").done(),
			rule("update").groups(legacyGroup).resources("replicationcontrollers/finalizers").done(),
			rule("list", "watch", "patch", "create", "delete").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		// Quota counts anything a quota may name, so it lists and watches everything.
		c("persistent-volume-binder",
			rule("get", "list", "watch", "update", "create", "delete").groups(legacyGroup).resources("persistentvolumes").done(),
			rule("update").groups(legacyGroup).resources("persistentvolumes/status").done(),
			rule("get", "list", "watch", "update").groups(legacyGroup).resources("persistentvolumeclaims").done(),
			rule("update").groups(legacyGroup).resources("persistentvolumeclaims/status").done(),
			rule("list", "watch", "get", "create", "delete").groups(legacyGroup).resources("pods").done(),
			rule("get", "list", "watch").groups(storageGroup).resources("storageclasses").done(),
			rule("watch").groups(legacyGroup).resources("events").done(),
			eventsRule()),
		c("pv-protection-controller",
			rule("get", "list", "watch", "update").groups(legacyGroup).resources("persistentvolumes").done(),
			eventsRule()),
		c("pvc-protection-controller",
			rule("get", "list", "watch", "update").groups(legacyGroup).resources("persistentvolumeclaims").done(),
			rule("list", "watch", "get").groups(legacyGroup).resources("pods").done(),
			eventsRule()),
		c("resourcequota-controller",
			rule("list", "watch").groups("*").resources("*").done(),
			rule("update").groups(legacyGroup).resources("resourcequotas/status").done(),
			eventsRule()),
		c("root-ca-cert-publisher",
			rule("create", "update").groups(legacyGroup).resources("configmaps").done(),
			eventsRule()),
		c("service-account-controller",
			rule("create").groups(legacyGroup).resources("serviceaccounts").done(),
			eventsRule()),
		c("statefulset-controller",
			rule("list", "watch").groups(legacyGroup).resources("pods").done(),
			rule("get", "list", "watch").groups(appsGroup).resources("statefulsets").done(),
			rule("update").groups(appsGroup).resources("statefulsets/status").done(),
			rule("update").groups(appsGroup).resources("statefulsets/finalizers").done(),
			rule("get", "create", "delete", "update", "patch").groups(legacyGroup).resources("pods").done(),
			rule("get", "create", "delete", "update", "patch", "list", "watch").groups(appsGroup).resources("controllerrevisions").done(),
			rule("get", "create", "list", "watch").groups(legacyGroup).resources("persistentvolumeclaims").done(),
			rule("update", "delete").groups(legacyGroup).resources("persistentvolumeclaims").done(),
			rule("update").groups(legacyGroup).resources("pods/finalizers").done(),
			eventsRule()),
		c("ttl-after-finished-controller",
			rule("get", "list", "watch", "delete").groups(batchGroup).resources("jobs").done(),
			eventsRule()),
	}
}

// ExtensionAuthenticationReader is the kube-system Role that lets an extension API
// server read how the apiserver authenticates the requests it proxies (the
// extension-apiserver-authentication ConfigMap); metrics-server and every server built
// on k8s.io/apiserver bind their ServiceAccount to it. Kube's.
const ExtensionAuthenticationReader = "extension-apiserver-authentication-reader"

// Roles is the policy's namespaced Roles, as kube's NamespaceRoles.
func Roles() []rbacv1.Role {
	roles := []rbacv1.Role{
		{ObjectMeta: metav1.ObjectMeta{Name: ExtensionAuthenticationReader, Namespace: controllerNamespace},
			Rules: []rbacv1.PolicyRule{rule(Read...).groups(legacyGroup).resources("configmaps").names("extension-apiserver-authentication").done()}},
	}
	for i := range roles {
		addDefaultMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// ClusterRoleBindings is the policy's ClusterRoleBindings.
func ClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	bindings := []rbacv1.ClusterRoleBinding{
		binding("cluster-admin", "cluster-admin", group(user.SystemPrivilegedGroup)),
		binding("system:monitoring", "system:monitoring", group(MonitoringGroup)),
		binding("system:discovery", "system:discovery", group(user.AllAuthenticated)),
		binding("system:basic-user", "system:basic-user", group(user.AllAuthenticated)),
		binding("system:public-info-viewer", "system:public-info-viewer", group(user.AllAuthenticated), group(user.AllUnauthenticated)),
		binding("system:node", "system:node"),
		binding("system:service-account-issuer-discovery", "system:service-account-issuer-discovery", group(serviceaccount.AllServiceAccountsGroup)),
		binding("system:node-proxier", "system:node-proxier", usr(KubeProxyUser)),
		// A node's proxy runs as its node, with the kubelet's own rotating certificate,
		// instead of one system:kube-proxy key copied onto every node (kubeadm gives
		// kube-proxy a ServiceAccount; skiff's proxy is no pod). What it adds to a node's
		// rights is system:node-proxier's reads of Services, Endpoints and EndpointSlices.
		binding("system:skiff:node-proxier", "system:node-proxier", group(user.NodesGroup)),
		binding("system:kube-controller-manager", "system:kube-controller-manager", usr(ControllerManagerUser)),
		binding("system:kube-scheduler", "system:kube-scheduler", usr(SchedulerUser)),
		binding("system:volume-scheduler", "system:volume-scheduler", usr(SchedulerUser)),
		binding(CSRSignerUser, CSRSignerUser, usr(CSRSignerUser)),
		binding(ExecProxyUser, ExecProxyUser, usr(ExecProxyUser)),
		binding("system:coredns", "system:coredns",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: "coredns"}, usr(CoreDNSUser)),
	}
	// kube binds each controller role to the controller's service account in kube-system
	// (--use-service-account-credentials); skiff's controller-manager runs every
	// controller as itself, so its user is bound too.
	for _, r := range controllerRoles() {
		name := r.Name[len(controllerRolePrefix):]
		bindings = append(bindings, binding(r.Name, r.Name,
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: controllerNamespace, Name: name},
			usr(ControllerManagerUser)))
	}
	for i := range bindings {
		addDefaultMetadata(&bindings[i].ObjectMeta)
	}
	// kubeadm's bootstrap-token bindings (created by kubeadm, so without the policy's
	// label): a bootstrap token may request a kubelet client certificate, and a node may
	// renew its own.
	return append(bindings,
		binding("kubeadm:kubelet-bootstrap", nodeBootstrapperRole, group(BootstrappersGroup)),
		binding("kubeadm:node-autoapprove-bootstrap", nodeClientRole, group(BootstrappersGroup)),
		binding("kubeadm:node-autoapprove-certificate-rotation", selfNodeClientRole, group(user.NodesGroup)),
	)
}

func binding(name, role string, subjects ...rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacGroup, Kind: "ClusterRole", Name: role},
		Subjects:   subjects,
	}
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacGroup, Name: name}
}

func usr(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacGroup, Name: name}
}

func addDefaultMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	for k, v := range Label {
		m.Labels[k] = v
	}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	for k, v := range Annotation {
		m.Annotations[k] = v
	}
}
