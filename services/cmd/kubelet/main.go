// Command kubelet runs skiff's node agent against an API server and a CRI
// runtime.
package main

import (
	"skiff.dev/services/internal/componentbase"
	"skiff.dev/services/kubelet/app"
)

func main() { componentbase.Run(app.NewOptions()) }
