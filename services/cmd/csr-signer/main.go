// Command csr-signer runs skiff's CSR approver and signer against an apiserver: it
// auto-approves kubelet client requests that fit Kubernetes' rules (and, with
// --approve-kubelet-serving, kubelet serving requests for a node's own addresses) and
// issues certificates for approved requests with the cluster CA of a `skiff pki init`
// directory.
package main

import (
	"skiff.dev/services/csrsigner/app"
	"skiff.dev/services/internal/componentbase"
)

func main() { componentbase.Run(app.NewOptions()) }
