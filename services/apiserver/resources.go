package apiserver

import (
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration/mutatingwebhookconfiguration"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicy"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicybinding"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingwebhookconfiguration"
	"skiff.dev/services/apiserver/registry/apiextensions/customresourcedefinition"
	"skiff.dev/services/apiserver/registry/apiregistration/apiservice"
	"skiff.dev/services/apiserver/registry/apps/controllerrevision"
	"skiff.dev/services/apiserver/registry/apps/daemonset"
	"skiff.dev/services/apiserver/registry/apps/deployment"
	"skiff.dev/services/apiserver/registry/apps/replicaset"
	"skiff.dev/services/apiserver/registry/apps/statefulset"
	authenticationregistry "skiff.dev/services/apiserver/registry/authentication"
	authorizationregistry "skiff.dev/services/apiserver/registry/authorization"
	"skiff.dev/services/apiserver/registry/autoscaling/horizontalpodautoscaler"
	"skiff.dev/services/apiserver/registry/batch/cronjob"
	"skiff.dev/services/apiserver/registry/batch/job"
	"skiff.dev/services/apiserver/registry/certificates/certificatesigningrequest"
	"skiff.dev/services/apiserver/registry/coordination/lease"
	"skiff.dev/services/apiserver/registry/core/configmap"
	"skiff.dev/services/apiserver/registry/core/endpoint"
	"skiff.dev/services/apiserver/registry/core/event"
	"skiff.dev/services/apiserver/registry/core/limitrange"
	"skiff.dev/services/apiserver/registry/core/namespace"
	"skiff.dev/services/apiserver/registry/core/node"
	"skiff.dev/services/apiserver/registry/core/persistentvolume"
	"skiff.dev/services/apiserver/registry/core/persistentvolumeclaim"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/core/podtemplate"
	"skiff.dev/services/apiserver/registry/core/replicationcontroller"
	"skiff.dev/services/apiserver/registry/core/resourcequota"
	"skiff.dev/services/apiserver/registry/core/secret"
	"skiff.dev/services/apiserver/registry/core/service"
	"skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/registry/discovery/endpointslice"
	eventsevent "skiff.dev/services/apiserver/registry/events/event"
	"skiff.dev/services/apiserver/registry/flowcontrol/flowschema"
	"skiff.dev/services/apiserver/registry/flowcontrol/prioritylevelconfiguration"
	"skiff.dev/services/apiserver/registry/networking/ingress"
	"skiff.dev/services/apiserver/registry/networking/ingressclass"
	"skiff.dev/services/apiserver/registry/node/runtimeclass"
	"skiff.dev/services/apiserver/registry/policy/poddisruptionbudget"
	rbacregistry "skiff.dev/services/apiserver/registry/rbac"
	"skiff.dev/services/apiserver/registry/rbac/clusterrole"
	"skiff.dev/services/apiserver/registry/rbac/clusterrolebinding"
	"skiff.dev/services/apiserver/registry/rbac/role"
	"skiff.dev/services/apiserver/registry/rbac/rolebinding"
	"skiff.dev/services/apiserver/registry/scheduling/priorityclass"
	"skiff.dev/services/apiserver/registry/storage/csidriver"
	"skiff.dev/services/apiserver/registry/storage/csinode"
	"skiff.dev/services/apiserver/registry/storage/csistoragecapacity"
	"skiff.dev/services/apiserver/registry/storage/storageclass"
	"skiff.dev/services/apiserver/registry/storage/volumeattachment"
)

// resources lists every resource the apiserver serves: the one place a new resource is
// registered. Its order is discovery's order within a group version.
func resources(execProxy *pod.ExecProxy, authorizer authorization.RuleAuthorizer, tokens serviceaccount.TokenConfig, tokenReviews *authenticationregistry.TokenReviewREST, rbacGuard *rbacregistry.Guard, serviceAllocators service.Allocators) []registry.Descriptor {
	return []registry.Descriptor{
		configmap.Descriptor,
		endpoint.Descriptor,
		event.Descriptor,
		limitrange.Descriptor,
		namespace.Descriptor,
		node.Descriptor,
		persistentvolumeclaim.Descriptor,
		persistentvolume.Descriptor,
		pod.NewDescriptor(execProxy),
		podtemplate.Descriptor,
		replicationcontroller.Descriptor,
		resourcequota.Descriptor,
		secret.Descriptor,
		service.NewDescriptor(serviceAllocators),
		serviceaccount.NewDescriptor(tokens),
		lease.Descriptor,
		certificatesigningrequest.Descriptor,
		endpointslice.Descriptor,
		authenticationregistry.Descriptor,
		authenticationregistry.NewTokenReviewDescriptor(tokenReviews),
		authorizationregistry.NewSelfSubjectAccessReviewDescriptor(authorizer),
		authorizationregistry.NewSelfSubjectRulesReviewDescriptor(authorizer),
		authorizationregistry.NewSubjectAccessReviewDescriptor(authorizer),
		authorizationregistry.NewLocalSubjectAccessReviewDescriptor(authorizer),
		role.NewDescriptor(rbacGuard),
		clusterrole.NewDescriptor(rbacGuard),
		rolebinding.NewDescriptor(rbacGuard),
		clusterrolebinding.NewDescriptor(rbacGuard),
		deployment.Descriptor,
		replicaset.Descriptor,
		controllerrevision.Descriptor,
		statefulset.Descriptor,
		daemonset.Descriptor,
		job.Descriptor,
		cronjob.Descriptor,
		eventsevent.Descriptor,
		runtimeclass.Descriptor,
		poddisruptionbudget.Descriptor,
		ingressclass.Descriptor,
		ingress.Descriptor,
		mutatingwebhookconfiguration.Descriptor,
		validatingwebhookconfiguration.Descriptor,
		validatingadmissionpolicy.NewDescriptor(authorizer),
		validatingadmissionpolicybinding.NewDescriptor(authorizer),
		customresourcedefinition.Descriptor,
		apiservice.Descriptor,
		flowschema.Descriptor,
		prioritylevelconfiguration.Descriptor,
		priorityclass.Descriptor,
		csidriver.Descriptor,
		csinode.Descriptor,
		csistoragecapacity.Descriptor,
		storageclass.Descriptor,
		volumeattachment.Descriptor,
		// autoscaling/v2 first: the storage version, and the group's preferred one.
		horizontalpodautoscaler.Descriptor,
		horizontalpodautoscaler.V1Descriptor,
	}
}
