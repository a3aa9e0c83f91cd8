// Command exec-proxy runs skiff's exec-proxy: it carries kubectl exec, attach,
// port-forward and logs from the apiserver to the kubelet on the pod's node.
package main

import (
	"skiff.dev/services/execproxy/app"
	"skiff.dev/services/internal/componentbase"
)

func main() { componentbase.Run(app.NewOptions()) }
