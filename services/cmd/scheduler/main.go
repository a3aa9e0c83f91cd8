// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"flag"
	"os"

	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/scheduler/app"
)

func main() {
	o := app.NewOptions()
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	os.Exit(componentbase.Main(o.Logger(), o.Run))
}
