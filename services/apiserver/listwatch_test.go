package apiserver_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"skiff.dev/services/apiserver/apiservertest"
	"skiff.dev/services/internal/kubeclient"
)

// TestInProcessInformers pins what the all-in-one's scheduler and controller manager
// rely on: informers over APIServer.ListWatchFor sync, see writes made over HTTP, apply
// their field selectors, and hold the watch cache's objects rather than copies.
func TestInProcessInformers(t *testing.T) {
	s := apiservertest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listWatchFor := kubeclient.ListWatchFor(s.ListWatchFor)

	if lw := s.ListWatchFor(&corev1.PodList{}, nil); lw != nil {
		t.Fatalf("ListWatchFor(*PodList) = %T, want nil: no resource stores that type", lw)
	}
	if _, err := s.ListWatchFor(&corev1.Pod{}, nil).List(metav1.ListOptions{FieldSelector: "spec.nope=x"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("list with an unsupported field selector: %v, want 400 Bad Request", err)
	}

	// A factory whose HTTP client reaches nothing: its informers sync only if they
	// list and watch in-process.
	unreachable := kubernetes.NewForConfigOrDie(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	factory := listWatchFor.InformerFactory(informers.NewSharedInformerFactory(unreachable, 0))
	pods := factory.Core().V1().Pods()
	deployments := factory.Apps().V1().Deployments()
	_, _ = pods.Informer(), deployments.Informer()
	// As the scheduler's: pods no node has yet.
	unscheduled := cache.NewSharedIndexInformer(listWatchFor.ListerWatcher(&corev1.Pod{}, func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName="
	}), &corev1.Pod{}, 0, cache.Indexers{})
	go unscheduled.RunWithContext(ctx)
	factory.Start(ctx.Done())
	defer func() { cancel(); factory.Shutdown() }()
	syncCtx, syncCancel := context.WithTimeout(ctx, 10*time.Second)
	defer syncCancel()
	for typ, synced := range factory.WaitForCacheSyncWithContext(syncCtx).Synced {
		if !synced {
			t.Fatalf("informer of %v did not sync in-process", typ)
		}
	}
	if !cache.WaitForCacheSync(syncCtx.Done(), unscheduled.HasSynced) {
		t.Fatal("filtered pod informer did not sync")
	}

	if _, err := cs.CoreV1().Pods("default").Create(ctx, newPod("shared"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"}}, Spec: newPod("t").Spec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var cached *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		cached, _ = pods.Lister().Pods("default").Get("shared")
		_, dErr := deployments.Lister().Deployments("default").Get("d")
		_, inUnscheduled, _ := unscheduled.GetStore().GetByKey("default/shared")
		return cached != nil && dErr == nil && inUnscheduled, nil
	}); err != nil {
		t.Fatalf("the pod and the deployment in the in-process informers: %v", err)
	}

	// The informer's pod is the watch cache's: a list from the cache hands out the same
	// containers, not a decoded copy of them.
	list, err := s.ListWatchFor(&corev1.Pod{}, nil).List(metav1.ListOptions{ResourceVersion: "0", FieldSelector: "metadata.name=shared"})
	if err != nil {
		t.Fatal(err)
	}
	items := list.(*corev1.PodList).Items
	if len(items) != 1 || cached.ResourceVersion != items[0].ResourceVersion {
		t.Fatalf("cache list %v, want the informer's pod at resourceVersion %s", items, cached.ResourceVersion)
	}
	if &cached.Spec.Containers[0] != &items[0].Spec.Containers[0] {
		t.Fatal("the informer holds a copy of the pod's containers, want the watch cache's own")
	}

	// Bound, the pod leaves the unscheduled informer, as an update that stops matching
	// its selector arrives as a delete.
	if err := cs.CoreV1().Pods("default").Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n1"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, inUnscheduled, _ := unscheduled.GetStore().GetByKey("default/shared")
		p, _ := pods.Lister().Pods("default").Get("shared")
		return !inUnscheduled && p != nil && p.Spec.NodeName == "n1", nil
	}); err != nil {
		t.Fatalf("bound pod: still unscheduled, or the informer lacks its binding: %v", err)
	}
}
