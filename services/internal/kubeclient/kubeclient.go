// Package kubeclient holds what skiff's components set on their apiserver clients beyond
// the kubeconfig: the content type of their requests, as kube's components'
// --kube-api-content-type does (k8s.io/component-base/config ClientConnectionConfiguration).
package kubeclient

import (
	"flag"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// DefaultContentType is what kube's components send by default: protobuf, which the
// apiserver decodes, and its watch events encode, several times faster than JSON.
// client-go's typed clients use it too when rest.Config.ContentType is unset
// (Request.UseProtobufAsDefault); the flag makes the choice visible and lets a user pick
// JSON, to read the traffic.
const DefaultContentType = runtime.ContentTypeProtobuf

// AddContentTypeFlag registers --kube-api-content-type on fs with DefaultContentType.
func AddContentTypeFlag(fs *flag.FlagSet) *string {
	return fs.String("kube-api-content-type", DefaultContentType,
		"content type of requests to the apiserver: application/vnd.kubernetes.protobuf or application/json")
}

// SetContentType makes cfg's typed clients send contentType and accept it or JSON (the
// apiserver answers JSON for what has no protobuf form). "" leaves client-go's JSON.
// Mirrors how kube-controller-manager and kube-scheduler build their rest.Config.
func SetContentType(cfg *rest.Config, contentType string) {
	if contentType == "" {
		return
	}
	cfg.ContentType = contentType
	cfg.AcceptContentTypes = contentType
	if contentType != runtime.ContentTypeJSON {
		cfg.AcceptContentTypes += "," + runtime.ContentTypeJSON
	}
}
