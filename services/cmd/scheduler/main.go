// Command scheduler runs skiff's scheduler against an apiserver: it binds
// pending pods whose spec.schedulerName is --scheduler-name to nodes.
package main

import (
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/scheduler/app"
)

func main() { componentbase.Run(app.NewOptions()) }
