package controllermanager

import (
	"flag"
	"fmt"
	"net"
	"strings"
	"time"

	"skiff.dev/services/controllermanager/podautoscaler"
)

// Options are kube-controller-manager's flags for the controllers skiff runs (kube's
// KubeControllerManagerConfiguration, flattened). Durations are time.Duration; rates
// are nodes per second.
type Options struct {
	// Controllers is --controllers: "*" enables every controller on by default, "name"
	// enables one, "-name" disables one (kube's names or their old aliases).
	Controllers []string

	// ConcurrentRSSyncs .. ConcurrentGCSyncs are the workers of each workload controller
	// (--concurrent-replicaset-syncs, --concurrent-rc-syncs,
	// --concurrent-deployment-syncs, --concurrent-daemonset-syncs,
	// --concurrent-job-syncs, --concurrent-gc-syncs).
	ConcurrentRSSyncs         int
	ConcurrentRCSyncs         int
	ConcurrentDeploymentSyncs int
	ConcurrentDaemonSetSyncs  int
	ConcurrentJobSyncs        int
	ConcurrentGCSyncs         int
	// ConcurrentResourceQuotaSyncs is the resource quota controller's workers per queue
	// (--concurrent-resource-quota-syncs).
	ConcurrentResourceQuotaSyncs int
	// ResourceQuotaSyncPeriod is how often every quota is recounted in full
	// (--resource-quota-sync-period).
	ResourceQuotaSyncPeriod time.Duration

	// NodeMonitorPeriod is how often node health is checked (--node-monitor-period).
	NodeMonitorPeriod time.Duration
	// NodeMonitorGracePeriod is how long a node may go without renewing its Lease or
	// posting status before it is marked Unknown (--node-monitor-grace-period).
	NodeMonitorGracePeriod time.Duration
	// NodeStartupGracePeriod is how long a node that never posted status may stay
	// unresponsive before it is marked Unknown (--node-startup-grace-period).
	NodeStartupGracePeriod time.Duration
	// NodeEvictionRate is how many nodes per second get the NoExecute taint in a healthy
	// zone (--node-eviction-rate).
	NodeEvictionRate float32
	// SecondaryNodeEvictionRate is that rate in a partially disrupted zone of more than
	// LargeClusterSizeThreshold nodes; smaller zones stop (--secondary-node-eviction-rate).
	SecondaryNodeEvictionRate float32
	// LargeClusterSizeThreshold is the zone size above which the secondary rate applies
	// (--large-cluster-size-threshold).
	LargeClusterSizeThreshold int
	// UnhealthyZoneThreshold is the fraction of not-Ready nodes (at least 3) that makes a
	// zone partially disrupted (--unhealthy-zone-threshold).
	UnhealthyZoneThreshold float32

	// AllocateNodeCIDRs turns node-ipam-controller's range allocator on
	// (--allocate-node-cidrs).
	AllocateNodeCIDRs bool
	// ClusterCIDRs are the pod networks node CIDRs are cut from, at most one per IP
	// family (--cluster-cidr, comma-separated).
	ClusterCIDRs []*net.IPNet
	// NodeCIDRMaskSizeIPv4 and NodeCIDRMaskSizeIPv6 are the prefix lengths of each
	// node's CIDR (--node-cidr-mask-size-ipv4/-ipv6; --node-cidr-mask-size sets both's
	// single-stack value).
	NodeCIDRMaskSizeIPv4 int
	NodeCIDRMaskSizeIPv6 int

	// TerminatedPodGCThreshold is how many terminated pods may exist before the oldest
	// are deleted; 0 turns that off (--terminated-pod-gc-threshold).
	TerminatedPodGCThreshold int

	// ConcurrentHorizontalPodAutoscalerSyncs is the horizontal-pod-autoscaler
	// controller's workers (--concurrent-horizontal-pod-autoscaler-syncs).
	ConcurrentHorizontalPodAutoscalerSyncs int
	// HorizontalPodAutoscalerSyncPeriod is how often each HorizontalPodAutoscaler is
	// reconciled (--horizontal-pod-autoscaler-sync-period).
	HorizontalPodAutoscalerSyncPeriod time.Duration
	// HorizontalPodAutoscalerDownscaleStabilizationWindow is how long the highest recent
	// recommendation holds off a scale-down
	// (--horizontal-pod-autoscaler-downscale-stabilization).
	HorizontalPodAutoscalerDownscaleStabilizationWindow time.Duration
	// HorizontalPodAutoscalerTolerance is the distance of the usage ratio to 1 within
	// which nothing is scaled (--horizontal-pod-autoscaler-tolerance).
	HorizontalPodAutoscalerTolerance float64
	// HorizontalPodAutoscalerCPUInitializationPeriod is how long after its start a pod's
	// cpu sample counts only once taken after the pod became ready
	// (--horizontal-pod-autoscaler-cpu-initialization-period).
	HorizontalPodAutoscalerCPUInitializationPeriod time.Duration
	// HorizontalPodAutoscalerInitialReadinessDelay is how long after its start a pod's
	// readiness changes are taken as its start-up
	// (--horizontal-pod-autoscaler-initial-readiness-delay).
	HorizontalPodAutoscalerInitialReadinessDelay time.Duration
}

// DefaultOptions are kube-controller-manager's defaults, with node CIDR allocation on
// over 10.244.0.0/16 (kube's default is off, with no cluster CIDR).
func DefaultOptions() Options {
	_, clusterCIDR, _ := net.ParseCIDR("10.244.0.0/16")
	return Options{
		Controllers:                  []string{"*"},
		ConcurrentRSSyncs:            5,
		ConcurrentRCSyncs:            5,
		ConcurrentDeploymentSyncs:    5,
		ConcurrentDaemonSetSyncs:     2,
		ConcurrentJobSyncs:           5,
		ConcurrentGCSyncs:            20,
		ConcurrentResourceQuotaSyncs: 5,
		ResourceQuotaSyncPeriod:      5 * time.Minute,
		NodeMonitorPeriod:            5 * time.Second,
		NodeMonitorGracePeriod:       40 * time.Second,
		NodeStartupGracePeriod:       time.Minute,
		NodeEvictionRate:             0.1,
		SecondaryNodeEvictionRate:    0.01,
		LargeClusterSizeThreshold:    50,
		UnhealthyZoneThreshold:       0.55,
		AllocateNodeCIDRs:            true,
		ClusterCIDRs:                 []*net.IPNet{clusterCIDR},
		NodeCIDRMaskSizeIPv4:         24,
		NodeCIDRMaskSizeIPv6:         64,
		TerminatedPodGCThreshold:     12500,

		ConcurrentHorizontalPodAutoscalerSyncs:              podautoscaler.DefaultWorkers,
		HorizontalPodAutoscalerSyncPeriod:                   podautoscaler.DefaultSyncPeriod,
		HorizontalPodAutoscalerDownscaleStabilizationWindow: podautoscaler.DefaultDownscaleStabilizationWindow,
		HorizontalPodAutoscalerTolerance:                    podautoscaler.DefaultTolerance,
		HorizontalPodAutoscalerCPUInitializationPeriod:      podautoscaler.DefaultCPUInitializationPeriod,
		HorizontalPodAutoscalerInitialReadinessDelay:        podautoscaler.DefaultDelayOfInitialReadinessStatus,
	}
}

// AddFlags registers kube-controller-manager's flags on fs, defaulting to o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.Func("controllers", fmt.Sprintf("comma-separated controllers to enable: '*' enables all on by default, 'foo' enables foo, '-foo' disables foo (default %q); all: %s",
		strings.Join(o.Controllers, ","), strings.Join(KnownControllers(), ", ")), func(v string) error {
		o.Controllers = strings.Split(v, ",")
		return nil
	})
	fs.IntVar(&o.ConcurrentRSSyncs, "concurrent-replicaset-syncs", o.ConcurrentRSSyncs, "ReplicaSets synced at once")
	fs.IntVar(&o.ConcurrentRCSyncs, "concurrent-rc-syncs", o.ConcurrentRCSyncs, "ReplicationControllers synced at once")
	fs.IntVar(&o.ConcurrentDeploymentSyncs, "concurrent-deployment-syncs", o.ConcurrentDeploymentSyncs, "Deployments synced at once")
	fs.IntVar(&o.ConcurrentDaemonSetSyncs, "concurrent-daemonset-syncs", o.ConcurrentDaemonSetSyncs, "DaemonSets synced at once")
	fs.IntVar(&o.ConcurrentJobSyncs, "concurrent-job-syncs", o.ConcurrentJobSyncs, "Jobs synced at once")
	fs.IntVar(&o.ConcurrentGCSyncs, "concurrent-gc-syncs", o.ConcurrentGCSyncs, "garbage collector workers")
	fs.IntVar(&o.ConcurrentResourceQuotaSyncs, "concurrent-resource-quota-syncs", o.ConcurrentResourceQuotaSyncs, "ResourceQuotas synced at once")
	fs.DurationVar(&o.ResourceQuotaSyncPeriod, "resource-quota-sync-period", o.ResourceQuotaSyncPeriod, "how often every ResourceQuota's usage is recounted in full")
	fs.DurationVar(&o.NodeMonitorPeriod, "node-monitor-period", o.NodeMonitorPeriod, "how often node health is checked")
	fs.DurationVar(&o.NodeMonitorGracePeriod, "node-monitor-grace-period", o.NodeMonitorGracePeriod, "how long a node may go without renewing its Lease before it is marked NotReady (Unknown)")
	fs.DurationVar(&o.NodeStartupGracePeriod, "node-startup-grace-period", o.NodeStartupGracePeriod, "how long a node that never posted status may stay silent before it is marked Unknown")
	float32Var(fs, &o.NodeEvictionRate, "node-eviction-rate", "nodes per second tainted NoExecute (evicting their pods) while a zone is healthy")
	float32Var(fs, &o.SecondaryNodeEvictionRate, "secondary-node-eviction-rate", "nodes per second tainted NoExecute while a zone is partially disrupted (0 below --large-cluster-size-threshold nodes)")
	fs.IntVar(&o.LargeClusterSizeThreshold, "large-cluster-size-threshold", o.LargeClusterSizeThreshold, "zone size above which the secondary eviction rate applies instead of stopping")
	float32Var(fs, &o.UnhealthyZoneThreshold, "unhealthy-zone-threshold", "fraction of not-Ready nodes (at least 3) that makes a zone partially disrupted")
	fs.BoolVar(&o.AllocateNodeCIDRs, "allocate-node-cidrs", o.AllocateNodeCIDRs, "allocate each node spec.podCIDRs from --cluster-cidr")
	fs.Func("cluster-cidr", fmt.Sprintf("comma-separated pod networks, at most one per IP family (default %s)", cidrsString(o.ClusterCIDRs)), func(v string) error {
		cidrs, err := parseCIDRs(v)
		if err != nil {
			return err
		}
		o.ClusterCIDRs = cidrs
		return nil
	})
	fs.Func("node-cidr-mask-size", fmt.Sprintf("prefix length of each node's CIDR in a single-stack cluster (default %d for IPv4)", o.NodeCIDRMaskSizeIPv4), func(v string) error {
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil {
			return err
		}
		o.NodeCIDRMaskSizeIPv4, o.NodeCIDRMaskSizeIPv6 = n, n
		return nil
	})
	fs.IntVar(&o.NodeCIDRMaskSizeIPv4, "node-cidr-mask-size-ipv4", o.NodeCIDRMaskSizeIPv4, "prefix length of each node's IPv4 CIDR")
	fs.IntVar(&o.NodeCIDRMaskSizeIPv6, "node-cidr-mask-size-ipv6", o.NodeCIDRMaskSizeIPv6, "prefix length of each node's IPv6 CIDR")
	fs.IntVar(&o.TerminatedPodGCThreshold, "terminated-pod-gc-threshold", o.TerminatedPodGCThreshold, "terminated pods kept before the oldest are deleted (0: never)")
	fs.IntVar(&o.ConcurrentHorizontalPodAutoscalerSyncs, "concurrent-horizontal-pod-autoscaler-syncs", o.ConcurrentHorizontalPodAutoscalerSyncs, "HorizontalPodAutoscalers synced at once")
	fs.DurationVar(&o.HorizontalPodAutoscalerSyncPeriod, "horizontal-pod-autoscaler-sync-period", o.HorizontalPodAutoscalerSyncPeriod, "how often each HorizontalPodAutoscaler reads its metrics and scales its target")
	fs.DurationVar(&o.HorizontalPodAutoscalerDownscaleStabilizationWindow, "horizontal-pod-autoscaler-downscale-stabilization", o.HorizontalPodAutoscalerDownscaleStabilizationWindow, "how long the highest recent recommendation holds off a scale-down")
	fs.Float64Var(&o.HorizontalPodAutoscalerTolerance, "horizontal-pod-autoscaler-tolerance", o.HorizontalPodAutoscalerTolerance, "distance of the usage ratio to 1.0 within which a HorizontalPodAutoscaler does not scale")
	fs.DurationVar(&o.HorizontalPodAutoscalerCPUInitializationPeriod, "horizontal-pod-autoscaler-cpu-initialization-period", o.HorizontalPodAutoscalerCPUInitializationPeriod, "how long after its start a pod's cpu sample counts only if taken after the pod became ready")
	fs.DurationVar(&o.HorizontalPodAutoscalerInitialReadinessDelay, "horizontal-pod-autoscaler-initial-readiness-delay", o.HorizontalPodAutoscalerInitialReadinessDelay, "how long after its start a pod's readiness changes are taken as its start-up")
}

// Validate reports the first unusable option.
func (o *Options) Validate() error {
	switch {
	case o.NodeMonitorPeriod <= 0:
		return fmt.Errorf("--node-monitor-period must be positive, got %s", o.NodeMonitorPeriod)
	case o.NodeMonitorGracePeriod <= 0 || o.NodeStartupGracePeriod <= 0:
		return fmt.Errorf("--node-monitor-grace-period and --node-startup-grace-period must be positive")
	case o.NodeEvictionRate < 0 || o.SecondaryNodeEvictionRate < 0:
		return fmt.Errorf("eviction rates must not be negative")
	case o.UnhealthyZoneThreshold <= 0 || o.UnhealthyZoneThreshold > 1:
		return fmt.Errorf("--unhealthy-zone-threshold must be in (0, 1], got %v", o.UnhealthyZoneThreshold)
	case o.HorizontalPodAutoscalerSyncPeriod <= 0:
		return fmt.Errorf("--horizontal-pod-autoscaler-sync-period must be positive, got %s", o.HorizontalPodAutoscalerSyncPeriod)
	case o.HorizontalPodAutoscalerTolerance < 0:
		return fmt.Errorf("--horizontal-pod-autoscaler-tolerance must not be negative")
	case o.TerminatedPodGCThreshold < 0:
		return fmt.Errorf("--terminated-pod-gc-threshold must not be negative")
	case o.AllocateNodeCIDRs && len(o.ClusterCIDRs) == 0:
		return fmt.Errorf("--allocate-node-cidrs needs --cluster-cidr")
	}
	for _, c := range o.Controllers {
		name := strings.TrimPrefix(c, "-")
		if c != "*" && controllerName(name) == "" {
			return fmt.Errorf("--controllers: unknown controller %q (known: %s)", name, strings.Join(KnownControllers(), ", "))
		}
	}
	return nil
}

func float32Var(fs *flag.FlagSet, p *float32, name, usage string) {
	fs.Func(name, fmt.Sprintf("%s (default %v)", usage, *p), func(v string) error {
		var f float32
		if _, err := fmt.Sscan(v, &f); err != nil {
			return err
		}
		*p = f
		return nil
	})
}

func parseCIDRs(v string) ([]*net.IPNet, error) {
	var out []*net.IPNet
	v4, v6 := 0, 0
	for _, s := range strings.Split(v, ",") {
		_, c, err := net.ParseCIDR(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		if c.IP.To4() != nil {
			v4++
		} else {
			v6++
		}
		out = append(out, c)
	}
	if v4 > 1 || v6 > 1 {
		return nil, fmt.Errorf("at most one CIDR per IP family, got %q", v)
	}
	return out, nil
}

func cidrsString(cidrs []*net.IPNet) string {
	s := make([]string, len(cidrs))
	for i, c := range cidrs {
		s[i] = c.String()
	}
	return strings.Join(s, ",")
}
