package apiserver

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"skiff.dev/services/apiserver/admission/policy"
	"skiff.dev/services/apiserver/admission/webhook"
	"skiff.dev/services/apiserver/authorization"
	"skiff.dev/services/apiserver/controller/validatingadmissionpolicystatus"
	"skiff.dev/services/apiserver/openapi"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicy"
	"skiff.dev/services/apiserver/registry/admissionregistration/validatingadmissionpolicybinding"
	"skiff.dev/services/apiserver/scheme"
)

// admissionPolicies builds the ValidatingAdmissionPolicy admission plugin and the
// policy status controller over the stores: policies and bindings from their watch
// caches, params from any served resource (custom resources included, once
// s.customResources serves them), schemas for type checking from the built-in OpenAPI
// definitions and the custom resources' documents.
func (s *APIServer) admissionPolicies(descriptors []registry.Descriptor, stores storeSet, authorizer authorization.Authorizer,
	equivalents func(schema.GroupVersionResource) []webhook.Equivalent) (*policy.Plugin, *validatingadmissionpolicystatus.Controller) {
	resources := s.policyResources(descriptors, stores)
	plugin := policy.New(policy.Config{
		Policies:    stores[validatingadmissionpolicy.Resource],
		Bindings:    stores[validatingadmissionpolicybinding.Resource],
		Namespaces:  stores[namespacesResource],
		Authorizer:  authorizer,
		Scheme:      scheme.Scheme,
		Equivalents: equivalents,
		Resources:   resources,
	})
	checker := &policy.TypeChecker{
		Resources:   resources,
		Definitions: openapi.GetOpenAPIDefinitions,
		Scheme:      scheme.Scheme,
		CustomResourceOpenAPI: func() map[string][]byte {
			if s.customResources == nil {
				return nil
			}
			return s.customResources.OpenAPIV3()
		},
	}
	return plugin, validatingadmissionpolicystatus.New(validatingadmissionpolicystatus.Config{Stores: stores, Check: checker.Check})
}

var namespacesResource = schema.GroupResource{Resource: "namespaces"}

// policyResources lists the served resources for policies: the built-in ones of
// descriptors (a resource stored as another's, events.k8s.io Events, has no objects of
// its own kind to read params from) and the custom resources served at the time of
// the call.
func (s *APIServer) policyResources(descriptors []registry.Descriptor, stores storeSet) func() []policy.Resource {
	builtin := make([]policy.Resource, 0, len(descriptors))
	for i := range descriptors {
		d := &descriptors[i]
		r := policy.Resource{Resource: d.GroupVersion.WithResource(d.Resource), Kind: d.GroupVersion.WithKind(d.Kind), Namespaced: d.Namespaced()}
		if st := stores[d.GroupResource()]; st != nil && d.StorageOf.Empty() {
			r.Objects = st
		}
		builtin = append(builtin, r)
	}
	return func() []policy.Resource {
		if s.customResources == nil {
			return builtin
		}
		out := append([]policy.Resource(nil), builtin...)
		for _, g := range s.customResources.Groups() {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					pr := policy.Resource{Resource: v.GroupVersion.WithResource(r.Name), Kind: v.GroupVersion.WithKind(r.Kind), Namespaced: r.Namespaced}
					if l, ok := r.Storage.(policy.Lister); ok {
						pr.Objects = l
					}
					out = append(out, pr)
				}
			}
		}
		return out
	}
}
