// Package plugins assembles the in-tree plugins: the registry that builds
// them and the default profile that enables them. Mirrors kube-scheduler's
// plugins.NewInTreeRegistry and apis/config/v1 getDefaultPlugins.
package plugins

import (
	"skiff.dev/services/scheduler/framework/plugins/defaultbinder"
	"skiff.dev/services/scheduler/framework/plugins/defaultpreemption"
	"skiff.dev/services/scheduler/framework/plugins/names"
	"skiff.dev/services/scheduler/framework/plugins/nodeaffinity"
	"skiff.dev/services/scheduler/framework/plugins/noderesources"
	"skiff.dev/services/scheduler/framework/plugins/nodeunschedulable"
	"skiff.dev/services/scheduler/framework/plugins/queuesort"
	"skiff.dev/services/scheduler/framework/plugins/tainttoleration"
	"skiff.dev/services/scheduler/framework/plugins/volumebinding"
	"skiff.dev/services/scheduler/framework/runtime"
)

// NewInTreeRegistry returns a fresh registry of every in-tree plugin.
func NewInTreeRegistry() runtime.Registry {
	return runtime.Registry{
		names.PrioritySort:      queuesort.New,
		names.NodeUnschedulable: nodeunschedulable.New,
		names.NodeAffinity:      nodeaffinity.New,
		names.TaintToleration:   tainttoleration.New,
		names.NodeResourcesFit:  noderesources.NewFit,
		names.VolumeBinding:     volumebinding.New,
		names.DefaultBinder:     defaultbinder.New,
		names.DefaultPreemption: defaultpreemption.New,
	}
}

// DefaultProfile returns the profile the scheduler runs under
// schedulerName: cheap, unresolvable filters first so that the reason a user
// reads is the most fundamental one, then resources, then volumes (VolumeBinding
// after NodeResourcesFit, as in kube's order, so that a pod's volumes are bound only
// on a node that fits it otherwise); score weights as in
// kube-scheduler's defaults (TaintToleration 3, NodeAffinity 2, resources 1).
func DefaultProfile(schedulerName string) runtime.Profile {
	return runtime.Profile{
		SchedulerName: schedulerName,
		Plugins: []runtime.PluginConfig{
			{Name: names.PrioritySort},
			{Name: names.NodeUnschedulable},
			{Name: names.NodeAffinity, Weight: 2},
			{Name: names.TaintToleration, Weight: 3},
			{Name: names.NodeResourcesFit, Weight: 1},
			{Name: names.VolumeBinding},
			{Name: names.DefaultPreemption},
			{Name: names.DefaultBinder},
		},
	}
}
