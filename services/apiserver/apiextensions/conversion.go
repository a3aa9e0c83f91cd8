package apiextensions

import (
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/conversion"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"

	"skiff.dev/services/internal/tracing"
)

// newConverterFactory builds kube's custom resource converters (package
// k8s.io/apiextensions-apiserver/pkg/apiserver/conversion): the None strategy changes
// apiVersion only; the Webhook strategy posts a ConversionReview to the CRD's
// conversion webhook, reached through resolver (a Service's ready endpoint) with the
// CRD's caBundle, each call a traced hop of tp.
func newConverterFactory(resolver webhook.ServiceResolver, tp trace.TracerProvider) (*conversion.CRConverterFactory, error) {
	traced := func(delegate webhook.AuthenticationInfoResolver) webhook.AuthenticationInfoResolver {
		wrap := func(cfg *rest.Config, err error) (*rest.Config, error) {
			if err != nil {
				return nil, err
			}
			cfg.Wrap(tracing.WrapTransport(tp))
			return cfg, nil
		}
		return &webhook.AuthenticationInfoResolverDelegator{
			ClientConfigForFunc: func(hostPort string) (*rest.Config, error) {
				return wrap(delegate.ClientConfigFor(hostPort))
			},
			ClientConfigForServiceFunc: func(name, namespace string, port int) (*rest.Config, error) {
				return wrap(delegate.ClientConfigForService(name, namespace, port))
			},
		}
	}
	return conversion.NewCRConverterFactory(resolver, traced)
}
