// Command kubelet runs skiff's node agent against an API server and a CRI
// runtime.
package main

import (
	"flag"
	"os"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/kubelet/app"
)

func main() {
	o := app.NewOptions()
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	os.Exit(componentbase.Main(o.Logger(), o.Run))
}
