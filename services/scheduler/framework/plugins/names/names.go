// Package names holds the names of the in-tree plugins, so that the registry,
// the default profile and the plugins agree. Mirrors kube-scheduler's
// pkg/scheduler/framework/plugins/names.
package names

// The in-tree plugin names, as kube-scheduler spells them.
const (
	PrioritySort      = "PrioritySort"
	NodeUnschedulable = "NodeUnschedulable"
	NodeAffinity      = "NodeAffinity"
	TaintToleration   = "TaintToleration"
	NodeResourcesFit  = "NodeResourcesFit"
	VolumeBinding     = "VolumeBinding"
	DefaultBinder     = "DefaultBinder"
	DefaultPreemption = "DefaultPreemption"
)
