package serviceaccount_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controllermanager/rootcacertpublisher"
	"skiff.dev/services/controllermanager/serviceaccount"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// TestDefaultServiceAccountAndRootCA runs the serviceaccount controller and
// root-ca-cert-publisher as system:kube-controller-manager: a new namespace gets its
// default ServiceAccount and kube-root-ca.crt, both come back when deleted or changed,
// and a terminating namespace gets neither back.
func TestDefaultServiceAccountAndRootCA(t *testing.T) {
	srv := controlplanetest.StartServerWithoutControllers(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	client := kubernetes.NewForConfigOrDie(srv.ClientConfig(pki.ControllerManager.CommonName, pki.ControllerManager.Organizations...))
	ctx, cancel := context.WithCancel(context.Background())
	factory := informers.NewSharedInformerFactory(client, 0)
	f := factory.Core().V1()
	sa := serviceaccount.New(f.Namespaces(), f.ServiceAccounts(), client, nil)
	ca := rootcacertpublisher.New(f.Namespaces(), f.ConfigMaps(), client, srv.CA.CertPEM)
	done := make(chan struct{}, 2)
	go func() { sa.Run(ctx, 1); done <- struct{}{} }()
	go func() { ca.Run(ctx, 1); done <- struct{}{} }()
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); <-done; <-done; factory.Shutdown() })

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first *corev1.ServiceAccount
	waitFor("default ServiceAccount and kube-root-ca.crt in a new namespace", func() bool {
		var err error
		first, err = admin.CoreV1().ServiceAccounts("a").Get(ctx, "default", metav1.GetOptions{})
		cm, cmErr := admin.CoreV1().ConfigMaps("a").Get(ctx, rootcacertpublisher.ConfigMapName, metav1.GetOptions{})
		return err == nil && cmErr == nil && cm.Data[rootcacertpublisher.DataKey] == string(srv.CA.CertPEM)
	})
	if err := admin.CoreV1().ServiceAccounts("a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm, err := admin.CoreV1().ConfigMaps("a").Get(ctx, rootcacertpublisher.ConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[rootcacertpublisher.DataKey] = "tampered"
	if _, err := admin.CoreV1().ConfigMaps("a").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("both made right again", func() bool {
		got, err := admin.CoreV1().ServiceAccounts("a").Get(ctx, "default", metav1.GetOptions{})
		cm, cmErr := admin.CoreV1().ConfigMaps("a").Get(ctx, rootcacertpublisher.ConfigMapName, metav1.GetOptions{})
		return err == nil && got.UID != first.UID && cmErr == nil && cm.Data[rootcacertpublisher.DataKey] == string(srv.CA.CertPEM)
	})

	// Terminating (no namespace controller runs): nothing is made again.
	if err := admin.CoreV1().Namespaces().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().ServiceAccounts("a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second namespace created afterwards is handled after "a"'s delete (one worker,
	// events in order), so once it has its account, "a"'s delete was seen.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("default ServiceAccount in b", func() bool {
		_, err := admin.CoreV1().ServiceAccounts("b").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	if _, err := admin.CoreV1().ServiceAccounts("a").Get(ctx, "default", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("terminating namespace's ServiceAccount: %v, want it not made again", err)
	}
}
