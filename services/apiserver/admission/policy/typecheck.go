package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// TypeChecker type-checks a policy's validations (expression and messageExpression)
// against the schema of each kind its matchConstraints' resourceRules name (at most 10;
// rules with wildcards name none) and of its paramKind, as kube's policy status
// controller does: kube's validating.TypeChecker, over the OpenAPI definitions of the
// built-in kinds and the OpenAPI v3 documents of the custom resources (where kube reads
// the apiserver's /openapi/v3 through discovery).
type TypeChecker struct {
	// Resources lists the served resources, to resolve a rule's resources to kinds.
	Resources func() []Resource
	// Definitions are the built-in types' OpenAPI definitions, named as Scheme names
	// its types (openapi.GetOpenAPIDefinitions and scheme.Scheme).
	Definitions common.GetOpenAPIDefinitions
	Scheme      *runtime.Scheme
	// CustomResourceOpenAPI returns the custom resources' OpenAPI v3 documents (JSON)
	// by path, "apis/<group>/<version>"; nil means none.
	CustomResourceOpenAPI func() map[string][]byte

	definitionsOnce sync.Once
	definitions     *resolver.DefinitionsSchemaResolver
}

// Check returns the policy's expression warnings (none: an empty list), to be written
// to its status.typeChecking.
func (c *TypeChecker) Check(policy *admissionregistrationv1.ValidatingAdmissionPolicy) []admissionregistrationv1.ExpressionWarning {
	// Resolving every built-in schema's references is costly: done once, when a first
	// policy is checked.
	c.definitionsOnce.Do(func() { c.definitions = resolver.NewDefinitionsSchemaResolver(c.Definitions, c.Scheme) })
	var resources []Resource
	if c.Resources != nil {
		resources = c.Resources()
	}
	checker := &validating.TypeChecker{
		SchemaResolver: c.definitions.Combine(openAPIV3Resolver(c.CustomResourceOpenAPI)),
		RestMapper:     restMapper(resources),
	}
	return checker.Check(policy)
}

// restMapper maps the resources to their kinds and back.
func restMapper(resources []Resource) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, r := range resources {
		scope := meta.RESTScopeRoot
		if r.Namespaced {
			scope = meta.RESTScopeNamespace
		}
		m.AddSpecific(r.Kind, r.Resource, r.Resource.GroupVersion().WithResource(strings.ToLower(r.Kind.Kind)), scope)
	}
	return m
}

// openAPIV3Resolver resolves a kind's schema from the OpenAPI v3 document of its group
// version: the model tagged with its x-kubernetes-group-version-kind, its references
// filled in. Mirrors resolver.ClientDiscoveryResolver, over documents in hand.
type openAPIV3Resolver func() map[string][]byte

func (r openAPIV3Resolver) ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error) {
	path := "apis/" + gvk.Group + "/" + gvk.Version
	if gvk.Group == "" {
		path = "api/" + gvk.Version
	}
	var doc []byte
	if r != nil {
		doc = r()[path]
	}
	if doc == nil {
		return nil, fmt.Errorf("cannot resolve group version %q: %w", gvk.GroupVersion(), resolver.ErrSchemaNotFound)
	}
	var parsed struct {
		Components struct {
			Schemas map[string]*spec.Schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &parsed); err != nil {
		return nil, err
	}
	const refPrefix = "#/components/schemas/"
	for ref, s := range parsed.Components.Schemas {
		var gvks []schema.GroupVersionKind
		if err := s.Extensions.GetObject("x-kubernetes-group-version-kind", &gvks); err != nil {
			return nil, err
		}
		for _, g := range gvks {
			if g == gvk {
				return resolver.PopulateRefs(func(ref string) (*spec.Schema, bool) {
					s, ok := parsed.Components.Schemas[strings.TrimPrefix(ref, refPrefix)]
					return s, ok
				}, ref)
			}
		}
	}
	return nil, fmt.Errorf("cannot resolve group version kind %q: %w", gvk, resolver.ErrSchemaNotFound)
}
