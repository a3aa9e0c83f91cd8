// Package node is the nodes resource and nodes/status. Mirrors
// k8s.io/kubernetes/pkg/registry/core/node.
package node

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/rest"
)

// Descriptor serves nodes and nodes/status.
var Descriptor = registry.Descriptor{
	GroupVersion: corev1.SchemeGroupVersion,
	Resource:     "nodes",
	SingularName: "node",
	Kind:         "Node",
	ShortNames:   []string{"no"},
	NewFunc:      func() runtime.Object { return &corev1.Node{} },
	NewListFunc:  func() runtime.Object { return &corev1.NodeList{} },
	Strategy:     Strategy{},
	REST: func(store *registry.Store, _ registry.Stores) (rest.Storage, map[string]registry.Subresource, error) {
		return store, map[string]registry.Subresource{
			"status": {Kind: "Node", Storage: store.WithStrategy(StatusStrategy{}).Subresource()},
		}, nil
	},
}

// Strategy is the nodes strategy. Nodes are created by their kubelet with status filled
// in, so create keeps status; later writes to the main resource do not change it.
type Strategy struct{}

// StatusStrategy is the strategy for nodes/status: only status may change.
type StatusStrategy struct{ Strategy }

// NamespaceScoped is false: nodes are cluster-scoped.
func (Strategy) NamespaceScoped() bool { return false }

// PrepareForCreate keeps what the kubelet sent.
func (Strategy) PrepareForCreate(context.Context, runtime.Object) {}

// PrepareForUpdate keeps the stored status.
func (Strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.Node).Status = old.(*corev1.Node).Status
}

// Validate checks the node's metadata (its name must be a DNS subdomain).
func (Strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	node := obj.(*corev1.Node)
	return apivalidation.ValidateObjectMeta(&node.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

// ValidateUpdate checks the metadata rules of an update, and that spec.podCIDRs,
// once set, never change (so two writers racing to assign them cannot both win:
// the second gets 422). Mirrors ValidateNodeUpdate's podCIDR rule.
func (Strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	node, oldNode := obj.(*corev1.Node), old.(*corev1.Node)
	errs := apivalidation.ValidateObjectMetaUpdate(&node.ObjectMeta, &oldNode.ObjectMeta, field.NewPath("metadata"))
	if len(oldNode.Spec.PodCIDRs) > 0 && !slices.Equal(oldNode.Spec.PodCIDRs, node.Spec.PodCIDRs) {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "podCIDRs"), `node updates may not change podCIDR except from "" to valid`))
	}
	return errs
}

// GetAttrs returns labels and the selectable fields metadata.name and spec.unschedulable.
func (Strategy) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return nil, nil, fmt.Errorf("not a node: %T", obj)
	}
	f := registry.ObjectMetaFieldsSet(&node.ObjectMeta, false)
	f["spec.unschedulable"] = fmt.Sprint(node.Spec.Unschedulable)
	return labels.Set(node.Labels), f, nil
}

// GetResetFields: the main resource keeps the stored status. Mirrors nodeStrategy.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("status"))}
}

// GetResetFields: nodes/status keeps the stored spec. Mirrors nodeStatusStrategy.
func (StatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{"v1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec"))}
}

// PrepareForUpdate keeps the stored spec.
func (StatusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	obj.(*corev1.Node).Spec = old.(*corev1.Node).Spec
}

// TableColumns are NAME STATUS ROLES AGE VERSION, and wide INTERNAL-IP EXTERNAL-IP
// OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME. Mirrors printNode.
func (Strategy) TableColumns() []metav1.TableColumnDefinition {
	return []metav1.TableColumnDefinition{
		registry.NameColumn,
		{Name: "Status", Type: "string", Description: "The status of the node"},
		{Name: "Roles", Type: "string", Description: "The roles of the node"},
		registry.AgeColumn,
		{Name: "Version", Type: "string", Description: "Kubelet Version reported by the node."},
		{Name: "Internal-IP", Type: "string", Priority: 1, Description: "List of addresses reachable to the node."},
		{Name: "External-IP", Type: "string", Priority: 1, Description: "List of addresses reachable to the node."},
		{Name: "OS-Image", Type: "string", Priority: 1, Description: "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."},
		{Name: "Kernel-Version", Type: "string", Priority: 1, Description: "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."},
		{Name: "Container-Runtime", Type: "string", Priority: 1, Description: "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."},
	}
}

// TableRow prints one node: STATUS is Ready/NotReady/Unknown plus ",SchedulingDisabled";
// ROLES come from node-role.kubernetes.io/<role> labels.
func (Strategy) TableRow(obj runtime.Object) []interface{} {
	node := obj.(*corev1.Node)
	status := "Unknown"
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			} else {
				status = "NotReady"
			}
		}
	}
	if node.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	var roles []string
	for k, v := range node.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if role := strings.TrimPrefix(k, "node-role.kubernetes.io/"); role != "" {
				roles = append(roles, role)
			}
		case k == "kubernetes.io/role" && v != "":
			roles = append(roles, v)
		}
	}
	sort.Strings(roles)
	rolesCell := "<none>"
	if len(roles) > 0 {
		rolesCell = strings.Join(roles, ",")
	}
	address := func(t corev1.NodeAddressType) string {
		for _, a := range node.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
		return "<none>"
	}
	orUnknown := func(s string) string {
		if s == "" {
			return "<unknown>"
		}
		return s
	}
	info := node.Status.NodeInfo
	return []interface{}{
		node.Name, status, rolesCell, registry.TranslateTimestampSince(node.CreationTimestamp), info.KubeletVersion,
		address(corev1.NodeInternalIP), address(corev1.NodeExternalIP),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}
}
