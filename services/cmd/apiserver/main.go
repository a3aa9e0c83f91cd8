// Command apiserver serves skiff's Kubernetes API over etcd: HTTPS on --secure-port with
// the certificates of a `skiff pki init` directory, client certificates and bootstrap
// tokens for authentication. Mirrors kube-apiserver's main flags.
package main

import (
	"skiff.dev/services/apiserver/app"
	"skiff.dev/services/internal/componentbase"
)

func main() { componentbase.Run(app.NewOptions()) }
