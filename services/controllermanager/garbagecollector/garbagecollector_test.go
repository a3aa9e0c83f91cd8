package garbagecollector_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controllermanager/deployment"
	"skiff.dev/services/controllermanager/garbagecollector"
	"skiff.dev/services/controllermanager/replicaset"
	"skiff.dev/services/controllermanager/replicationcontroller"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/eventrecorder"
)

// start runs a real apiserver with the ReplicaSet, ReplicationController and Deployment
// controllers and the garbage collector.
func start(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "controller-manager", Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	rsc := replicaset.New(factory, cs, recorder)
	rcc := replicationcontroller.New(factory, cs, recorder)
	dc := deployment.New(factory, cs, recorder)
	gc := garbagecollector.New(factory, cs, recorder)
	factory.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(4)
	go func() { defer wg.Done(); rsc.Run(ctx, 2) }()
	go func() { defer wg.Done(); rcc.Run(ctx, 2) }()
	go func() { defer wg.Done(); dc.Run(ctx, 2) }()
	go func() { defer wg.Done(); gc.Run(ctx, 2) }()
	go func() { _ = recorder.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait(); factory.Shutdown() })
	return cs
}

func newDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
}

func waitFor(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// counts returns how many ReplicaSets and pods carry the label app=name.
func counts(ctx context.Context, cs kubernetes.Interface, name string) (int, int, error) {
	sel := metav1.ListOptions{LabelSelector: "app=" + name}
	rsets, err := cs.AppsV1().ReplicaSets("default").List(ctx, sel)
	if err != nil {
		return 0, 0, err
	}
	pods, err := cs.CoreV1().Pods("default").List(ctx, sel)
	if err != nil {
		return 0, 0, err
	}
	return len(rsets.Items), len(pods.Items), nil
}

// createAndWait creates a Deployment and waits for its ReplicaSet and pods.
func createAndWait(t *testing.T, cs kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), newDeployment(name, replicas), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the ReplicaSet and pods", func(ctx context.Context) (bool, error) {
		rsets, pods, err := counts(ctx, cs, name)
		return err == nil && rsets == 1 && pods == int(replicas), nil
	})
}

func TestBackgroundDeletionRemovesDependentsAfterTheOwner(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createAndWait(t, cs, "bg", 2)
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "bg", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments("default").Get(ctx, "bg", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a background delete removes the owner at once; get: %v", err)
	}
	waitFor(t, "the dependents to go", func(ctx context.Context) (bool, error) {
		rsets, pods, err := counts(ctx, cs, "bg")
		return err == nil && rsets == 0 && pods == 0, nil
	})
}

func TestForegroundDeletionRemovesDependentsBeforeTheOwner(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createAndWait(t, cs, "fg", 3)
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "fg", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to go, last", func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments("default").Get(ctx, "fg", metav1.GetOptions{})
		if err == nil {
			return false, nil
		}
		if !apierrors.IsNotFound(err) {
			return false, err
		}
		rsets, pods, err := counts(ctx, cs, "fg")
		if err != nil {
			return false, err
		}
		if rsets != 0 || pods != 0 {
			t.Fatalf("the Deployment went before its dependents: %d ReplicaSets, %d pods left", rsets, pods)
		}
		return true, nil
	})
}

func TestOrphanDeletionLeavesDependentsWithoutOwnerReference(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createAndWait(t, cs, "orphans", 2)
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "orphans", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to go", func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments("default").Get(ctx, "orphans", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	rsets, err := cs.AppsV1().ReplicaSets("default").List(ctx, metav1.ListOptions{LabelSelector: "app=orphans"})
	if err != nil || len(rsets.Items) != 1 {
		t.Fatalf("the ReplicaSet should stay: %v %v", rsets, err)
	}
	if refs := rsets.Items[0].OwnerReferences; len(refs) != 0 {
		t.Errorf("the orphaned ReplicaSet still has owner references: %+v", refs)
	}
	if _, pods, err := counts(ctx, cs, "orphans"); err != nil || pods != 2 {
		t.Errorf("the ReplicaSet's pods should stay: %d (%v)", pods, err)
	}
}

// createRCAndWait creates a ReplicationController and waits for its pods.
func createRCAndWait(t *testing.T, cs kubernetes.Interface, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	rc := &corev1.ReplicationController{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ReplicationControllerSpec{
			Replicas: ptr.To(replicas),
			Selector: labels,
			Template: &corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
			},
		},
	}
	if _, err := cs.CoreV1().ReplicationControllers("default").Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pods", func(ctx context.Context) (bool, error) {
		_, pods, err := counts(ctx, cs, name)
		return err == nil && pods == int(replicas), nil
	})
}

// TestReplicationControllerDeletionRemovesItsPods: the collector knows
// ReplicationControllers as owners, as kubectl delete rc (Background) needs.
func TestReplicationControllerDeletionRemovesItsPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createRCAndWait(t, cs, "rc-bg", 2)
	if err := cs.CoreV1().ReplicationControllers("default").Delete(ctx, "rc-bg", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pods to go", func(ctx context.Context) (bool, error) {
		_, pods, err := counts(ctx, cs, "rc-bg")
		return err == nil && pods == 0, nil
	})
}

// TestReplicationControllerDeletedWithoutPolicyOrphansItsPods: a v1 delete naming no
// policy orphans (kube's default for ReplicationControllers): the collector watches
// ReplicationControllers, so it releases the pods and lets the owner go.
func TestReplicationControllerDeletedWithoutPolicyOrphansItsPods(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	createRCAndWait(t, cs, "rc-orphans", 2)
	if err := cs.CoreV1().ReplicationControllers("default").Delete(ctx, "rc-orphans", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to go", func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ReplicationControllers("default").Get(ctx, "rc-orphans", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=rc-orphans"})
	if err != nil || len(pods.Items) != 2 {
		t.Fatalf("the pods should stay: %v %v", pods, err)
	}
	for _, p := range pods.Items {
		if len(p.OwnerReferences) != 0 {
			t.Errorf("pod %s still has owner references: %+v", p.Name, p.OwnerReferences)
		}
	}
}

// TestCustomResourcesAsOwnersAndDependents: a Deployment owned by a custom resource
// goes with it, and a custom resource owned by a ConfigMap-less Deployment goes with
// the Deployment: custom resources are followed once discovery lists them.
func TestCustomResourcesAsOwnersAndDependents(t *testing.T) {
	cfg := controlplanetest.Start(t)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	crds := apiextensionsclient.NewForConfigOrDie(cfg).ApiextensionsV1().CustomResourceDefinitions()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "apps.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "apps", Singular: "app", Kind: "App"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true)}}}},
		},
	}
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apps := dynamic.NewForConfigOrDie(cfg).Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "apps"}).Namespace("default")
	var owner *unstructured.Unstructured
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		owner, err = apps.Create(ctx, &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "example.com/v1", "kind": "App", "metadata": map[string]interface{}{"name": "owner"}}}, metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the CRD is not served: %v", err)
	}

	recorder, err := eventrecorder.New(eventrecorder.Config{Component: "controller-manager", Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	gc := garbagecollector.New(factory, cs, recorder).WithCustomResources(dynamic.NewForConfigOrDie(cfg), cs.Discovery(), 200*time.Millisecond)
	runCtx, stop := context.WithCancel(context.Background())
	factory.Start(runCtx.Done())
	done := make(chan struct{})
	go func() { defer close(done); gc.Run(runCtx, 2) }()
	t.Cleanup(func() { stop(); <-done; factory.Shutdown() })

	dependent := newDeployment("dependent", 0)
	dependent.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "App", Name: "owner", UID: owner.GetUID()}}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dependent, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ownerDeployment, err := cs.AppsV1().Deployments("default").Create(ctx, newDeployment("owner-deployment", 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	child := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "App",
		"metadata": map[string]interface{}{"name": "child", "ownerReferences": []interface{}{map[string]interface{}{
			"apiVersion": "apps/v1", "kind": "Deployment", "name": "owner-deployment", "uid": string(ownerDeployment.UID)}}}}}
	if _, err := apps.Create(ctx, child, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := apps.Delete(ctx, "owner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.AppsV1().Deployments("default").Delete(ctx, "owner-deployment", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.AppsV1().Deployments("default").Get(ctx, "dependent", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the Deployment owned by a deleted custom resource was not collected: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := apps.Get(ctx, "child", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("the custom resource owned by a deleted Deployment was not collected: %v", err)
	}
}

// TestDependencyCircleIsCollected: three pods owning each other in a circle (each
// blockOwnerDeletion) all go once one of them is deleted in the foreground, as kube's
// "should not be blocked by dependency circle" conformance spec requires.
func TestDependencyCircleIsCollected(t *testing.T) {
	cs := start(t)
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	var created []*corev1.Pod
	for _, name := range []string{"pod1", "pod2", "pod3"} {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, p)
	}
	// pod1 is owned by pod3, pod2 by pod1, pod3 by pod2.
	for i, p := range created {
		owner := created[(i+2)%3]
		patch := fmt.Sprintf(`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":%q,"uid":%q,"controller":true,"blockOwnerDeletion":true}]}}`, owner.Name, owner.UID)
		if _, err := pods.Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// In the foreground, as the spec does: each pod then waits for the next one's
	// dependents, in a circle the collector must break.
	if err := pods.Delete(ctx, "pod1", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground),
		Preconditions: metav1.NewUIDPreconditions(string(created[0].UID))}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every pod of the circle to go", func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, nil
	})
}
