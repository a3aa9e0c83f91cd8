package controllermanager

import (
	"context"
	"errors"

	"k8s.io/client-go/dynamic"

	"skiff.dev/services/controllermanager/clusterroleaggregation"
	"skiff.dev/services/controllermanager/namespace"
	"skiff.dev/services/controllermanager/rootcacertpublisher"
	"skiff.dev/services/controllermanager/serviceaccount"
	"skiff.dev/services/controllermanager/tokencleaner"
)

// The start functions of the controllers every namespace relies on, of
// clusterrole-aggregation and of the token cleaner (kube's
// cmd/kube-controller-manager/app core.go, certificates.go, rbac.go and bootstrap.go).
// Each records events, if ever, under its kube component name passed to
// Events.ForComponent; these five record none, as kube's do not.

// Workers of each, as kube starts them: --concurrent-namespace-syncs (10), one for the
// service accounts and root-ca-cert-publisher, five for clusterrole-aggregation.
const (
	namespaceWorkers      = 10
	serviceAccountWorkers = 1
	rootCAWorkers         = 1
	aggregationWorkers    = 5
)

func startNamespaceController(ctx context.Context, cc ControllerContext) error {
	if cc.RESTConfig == nil {
		return errors.New("the namespace controller needs Config.RESTConfig for its dynamic client")
	}
	dyn, err := dynamic.NewForConfig(cc.RESTConfig)
	if err != nil {
		return err
	}
	c := namespace.New(cc.InformerFactory.Core().V1().Namespaces(), cc.Client, cc.Client.Discovery(), dyn)
	go c.Run(ctx, namespaceWorkers)
	return nil
}

func startServiceAccountController(ctx context.Context, cc ControllerContext) error {
	f := cc.InformerFactory.Core().V1()
	go serviceaccount.New(f.Namespaces(), f.ServiceAccounts(), cc.Client, nil).Run(ctx, serviceAccountWorkers)
	return nil
}

func startRootCACertPublisher(ctx context.Context, cc ControllerContext) error {
	if len(cc.RootCA) == 0 {
		return errors.New("root-ca-cert-publisher needs a root CA (--root-ca-file, or a kubeconfig with a CA)")
	}
	f := cc.InformerFactory.Core().V1()
	go rootcacertpublisher.New(f.Namespaces(), f.ConfigMaps(), cc.Client, cc.RootCA).Run(ctx, rootCAWorkers)
	return nil
}

func startClusterRoleAggregationController(ctx context.Context, cc ControllerContext) error {
	go clusterroleaggregation.New(cc.InformerFactory.Rbac().V1().ClusterRoles(), cc.Client).Run(ctx, aggregationWorkers)
	return nil
}

// startTokenCleanerController runs the token cleaner, which kube-controller-manager
// leaves off unless --controllers names it (as kubeadm does); skiff runs it by default.
func startTokenCleanerController(ctx context.Context, cc ControllerContext) error {
	go tokencleaner.New(cc.InformerFactory.Core().V1().Secrets(), cc.Client, cc.Clock).Run(ctx)
	return nil
}
