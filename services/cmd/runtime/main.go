// Command runtime serves one of skiff's built-in CRI runtimes (process or sim) on a unix
// socket, for a kubelet running as its own process: the kubelet image of the compose
// stack starts it beside the kubelet, as a node runs containerd beside its kubelet.
package main

import (
	"skiff.dev/services/cri/app"
	"skiff.dev/services/internal/componentbase"
)

func main() { componentbase.Run(app.NewOptions()) }
