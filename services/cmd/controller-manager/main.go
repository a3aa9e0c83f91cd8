// Command controller-manager runs skiff's kube-controller-manager against an apiserver:
// node lifecycle and taint eviction, node IPAM, pod garbage collection, the workload and
// endpoint controllers, namespace deletion, default ServiceAccounts, kube-root-ca.crt and
// ClusterRole aggregation, in whichever replica holds the kube-system/kube-controller-manager Lease.
package main

import (
	"skiff.dev/services/controllermanager/app"
	"skiff.dev/services/internal/componentbase"
)

func main() { componentbase.Run(app.NewOptions()) }
