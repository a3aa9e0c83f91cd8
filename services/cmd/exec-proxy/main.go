// Command exec-proxy runs skiff's exec-proxy: it carries kubectl exec, attach,
// port-forward and logs from the apiserver to the kubelet on the pod's node.
package main

import (
	"flag"
	"os"

	"skiff.dev/services/execproxy/app"
	"skiff.dev/services/internal/componentbase"
)

func main() {
	o := app.NewOptions()
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	os.Exit(componentbase.Main(o.Logger(), o.Run))
}
