package clientgo

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
)

// TestInformersConvergeAcrossCompactions: with etcd compacted every 200 ms (kube's
// default is 5 min) while pods come and go, an informer still ends with exactly the pods
// etcd holds, and a list continuation older than the compaction gets 410 Gone with
// kube's reason Expired, which kubectl and client-go's pager answer by listing again.
func TestInformersConvergeAcrossCompactions(t *testing.T) {
	srv := controlplanetest.StartServer(t, func(c *apiserver.Config) { c.EtcdCompactionInterval = 200 * time.Millisecond })
	client := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods := client.CoreV1().Pods("default")
	create := func(name string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		create(fmt.Sprintf("kept-%d", i))
	}
	page, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || page.Continue == "" {
		t.Fatalf("first page: %v, continue %q", err, page.Continue)
	}

	informerCtx, stopInformer := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Core().V1().Pods().Informer()
	factory.Start(informerCtx.Done())
	defer func() { stopInformer(); factory.Shutdown() }()

	// Pods come and go until the first page's continue token is compacted away, and on
	// for as many again, so the informer watches across several compactions.
	churned, expiredAt := 0, 0
	for expiredAt == 0 || churned < 2*expiredAt {
		if ctx.Err() != nil {
			t.Fatalf("the continue token still served after %d pods of churn", churned)
		}
		name := fmt.Sprintf("churn-%d", churned)
		create(name)
		if churned%2 == 0 {
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		churned++
		if expiredAt != 0 {
			continue
		}
		_, err := pods.List(ctx, metav1.ListOptions{Limit: 1, Continue: page.Continue})
		switch {
		case err == nil:
		case apierrors.IsResourceExpired(err) && apierrors.ReasonForError(err) == metav1.StatusReasonExpired:
			expiredAt = churned
		default:
			t.Fatalf("continuing a list from before the compactions: %v (reason %q), want 410 Expired", err, apierrors.ReasonForError(err))
		}
	}

	want, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kept := 3 + churned/2; len(want.Items) != kept {
		t.Fatalf("etcd holds %d pods, want %d", len(want.Items), kept)
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		keys := informer.GetStore().ListKeys()
		if len(keys) != len(want.Items) {
			return false, nil
		}
		for _, p := range want.Items {
			if _, ok, _ := informer.GetStore().GetByKey("default/" + p.Name); !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the informer holds %d pods, etcd %d: %v", len(informer.GetStore().ListKeys()), len(want.Items), err)
	}
}
