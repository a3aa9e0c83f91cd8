// Command proxy is skiff's kube-proxy: on one node it watches Services and
// EndpointSlices and programs the node's nftables (table ip skiff-proxy) so that
// ClusterIPs, NodePorts and external IPs reach the Services' ready endpoints. It needs
// root or CAP_NET_ADMIN and the nft binary; without them it says so and exits 1.
// `proxy --cleanup` deletes the table and exits, as `kube-proxy --cleanup` does.
package main

import (
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/proxy/app"
)

func main() { componentbase.Run(app.NewOptions()) }
