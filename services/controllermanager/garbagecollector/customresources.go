package garbagecollector

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// DefaultCustomResourceResync is how often the collector asks discovery which custom
// resources are served, as kube's collector resyncs its monitors (30 s).
const DefaultCustomResourceResync = 30 * time.Second

// customResources is the part of the collector that follows custom resources: each
// kind discovery lists outside Kubernetes' own groups that can be listed, watched,
// patched and deleted is watched through a dynamic informer while it is served, so
// custom resources are collected as dependents and looked up as owners. Mirrors
// GraphBuilder.syncMonitors, over the dynamic client (kube's uses the metadata client).
type customResources struct {
	dynamic   dynamic.Interface
	discovery discovery.DiscoveryInterface
	resync    time.Duration
	monitors  map[schema.GroupVersionResource]*monitor
}

// monitor is one watched custom resource.
type monitor struct {
	gvk      schema.GroupVersionKind
	informer cache.SharedIndexInformer
	stop     chan struct{}
}

// WithCustomResources makes gc follow custom resources found through discovery every
// resync (0: DefaultCustomResourceResync), read and written through dyn. It returns gc.
func (gc *GarbageCollector) WithCustomResources(dyn dynamic.Interface, disco discovery.DiscoveryInterface, resync time.Duration) *GarbageCollector {
	if resync <= 0 {
		resync = DefaultCustomResourceResync
	}
	gc.custom = &customResources{dynamic: dyn, discovery: disco, resync: resync, monitors: map[schema.GroupVersionResource]*monitor{}}
	return gc
}

// builtinGroups are Kubernetes' own API groups, whose kinds the collector either
// watches through typed informers or leaves alone; custom resources live elsewhere.
var builtinGroups = func() map[string]bool {
	groups := map[string]bool{}
	for _, gv := range scheme.Scheme.PrioritizedVersionsAllGroups() {
		groups[gv.Group] = true
	}
	return groups
}()

// mayBeCustomResource reports whether apiVersion could be a custom resource's the
// collector follows: it follows custom resources and the group is not Kubernetes' own.
func (gc *GarbageCollector) mayBeCustomResource(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && gc.custom != nil && !builtinGroups[gv.Group]
}

// runCustomResources keeps the monitors in line with discovery until ctx ends, then
// stops them.
func (gc *GarbageCollector) runCustomResources(ctx context.Context) {
	c := gc.custom
	defer func() {
		for gvr, m := range c.monitors {
			close(m.stop)
			delete(c.monitors, gvr)
		}
	}()
	ticker := time.NewTicker(c.resync)
	defer ticker.Stop()
	for {
		gc.syncMonitors()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// syncMonitors starts a monitor for each custom resource discovery serves and stops
// those of resources no longer served. A discovery failure keeps the monitors as they
// are, as kube's collector does with partial discovery.
func (gc *GarbageCollector) syncMonitors() {
	c := gc.custom
	lists, err := c.discovery.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		gc.log.Info("discovering custom resources failed; will retry", "err", err)
		return
	}
	served := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	for _, list := range lists {
		gv, perr := schema.ParseGroupVersion(list.GroupVersion)
		if perr != nil || builtinGroups[gv.Group] {
			continue
		}
		for _, r := range list.APIResources {
			if r.Name == "" || strings.Contains(r.Name, "/") {
				continue
			}
			if !hasVerbs(r.Verbs, "list", "watch", "delete", "patch", "get") {
				continue
			}
			served[gv.WithResource(r.Name)] = gv.WithKind(r.Kind)
			gc.resourcesMu.Lock()
			gc.resources[gv.WithKind(r.Kind)] = resource{gvk: gv.WithKind(r.Kind), name: r.Name, namespaced: r.Namespaced,
				dynamic: c.dynamic.Resource(gv.WithResource(r.Name))}
			gc.resourcesMu.Unlock()
		}
	}
	for gvr, m := range c.monitors {
		if _, ok := served[gvr]; ok || err != nil {
			continue // still served, or discovery was partial: keep it
		}
		close(m.stop)
		delete(c.monitors, gvr)
		gc.resourcesMu.Lock()
		delete(gc.resources, m.gvk)
		gc.resourcesMu.Unlock()
	}
	for gvr, gvk := range served {
		if _, ok := c.monitors[gvr]; ok {
			continue
		}
		informer := dynamicinformer.NewFilteredDynamicInformer(c.dynamic, gvr, "", 0, cache.Indexers{}, nil).Informer()
		kind := gvk
		_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj interface{}) { gc.observe(kind, obj) },
			UpdateFunc: func(_, obj interface{}) { gc.observe(kind, obj) },
			DeleteFunc: func(obj interface{}) { gc.forget(obj) },
		})
		m := &monitor{gvk: gvk, informer: informer, stop: make(chan struct{})}
		c.monitors[gvr] = m
		go informer.Run(m.stop)
	}
}

func hasVerbs(verbs []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(verbs, w) {
			return false
		}
	}
	return true
}
