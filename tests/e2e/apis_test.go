package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	nodev1 "k8s.io/api/node/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"
)

// TestEventsAPI walks through the conformance suite's [sig-instrumentation] Events API
// tests (test/e2e/instrumentation/events.go) with client-go against skiff with the sim
// runtime, and reads the same events with the real kubectl: an events.k8s.io/v1 event
// created, listed in its namespace and across namespaces, selected by core/v1's source
// and events.k8s.io's reportingController, patched and updated and read back as written,
// deleted, and a collection of them deleted.
func TestEventsAPI(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "events-e2e"
	c.mustKubectl(ctx, "create", "namespace", ns)
	events, core, all := c.Client.EventsV1().Events(ns), c.Client.CoreV1().Events(ns), c.Client.EventsV1().Events("")
	newEvent := func(name, label string) *eventsv1.Event {
		return &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
			Regarding:  corev1.ObjectReference{Namespace: ns},
			EventTime:  metav1.MicroTime{Time: time.Unix(1505828956, 0)},
			Note:       "This is " + name, Action: "Do", Reason: "Test", Type: "Normal",
			ReportingController: "test-controller", ReportingInstance: "test-node",
		}
	}
	listed := func(t *testing.T, client interface {
		List(context.Context, metav1.ListOptions) (*eventsv1.EventList, error)
	}, name string) bool {
		t.Helper()
		list, err := client.List(ctx, metav1.ListOptions{LabelSelector: "testevent-constant=true"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Name == name && e.Namespace == ns {
				return true
			}
		}
		return false
	}

	t.Run("an event can be fetched, patched, deleted, and listed", func(t *testing.T) {
		created, err := events.Create(ctx, newEvent("event-test", "testevent-constant"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !listed(t, all, "event-test") || !listed(t, events, "event-test") {
			t.Fatal("the event is not listed across namespaces and in its own")
		}
		coreList, err := core.List(ctx, metav1.ListOptions{FieldSelector: "source=test-controller"})
		if err != nil || len(coreList.Items) != 1 || coreList.Items[0].Name != "event-test" || coreList.Items[0].UID != created.UID {
			t.Fatalf("core/v1 by source: %v %+v", err, coreList)
		}
		v1List, err := events.List(ctx, metav1.ListOptions{FieldSelector: "reportingController=test-controller"})
		if err != nil || len(v1List.Items) != 1 || v1List.Items[0].Name != "event-test" {
			t.Fatalf("events.k8s.io/v1 by reportingController: %v %+v", err, v1List)
		}

		testEvent, err := events.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldData, _ := json.Marshal(testEvent)
		newData := testEvent.DeepCopy()
		series := &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828951, 0)}}
		newData.Series = series
		newJSON, _ := json.Marshal(newData)
		patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newJSON, eventsv1.Event{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := events.Patch(ctx, "event-test", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := events.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.ResourceVersion, testEvent.ResourceVersion, got.ManagedFields, testEvent.ManagedFields = "", "", nil, nil
		testEvent.Series = series
		if !apiequality.Semantic.DeepEqual(testEvent, got) {
			t.Fatalf("patched:\n got %+v\nwant %+v", got, testEvent)
		}
		testEvent.Series = &eventsv1.EventSeries{Count: 100, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828956, 0)}}
		if _, err := events.Update(ctx, testEvent, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err = events.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.ResourceVersion, got.ManagedFields = "", nil
		if !apiequality.Semantic.DeepEqual(testEvent, got) {
			t.Fatalf("updated:\n got %+v\nwant %+v", got, testEvent)
		}

		// kubectl reads the same event in both groups, with kube's event columns.
		out := c.mustKubectl(ctx, "get", "events.v1.events.k8s.io", "-n", ns)
		if !regexp.MustCompile(`LAST SEEN\s+TYPE\s+REASON\s+OBJECT\s+MESSAGE`).MatchString(out) || !strings.Contains(out, "This is event-test") {
			t.Errorf("kubectl get events.v1.events.k8s.io:\n%s", out)
		}
		if out := c.mustKubectl(ctx, "get", "events.events.k8s.io", "event-test", "-n", ns, "-o", "jsonpath={.note} {.series.count}"); out != "This is event-test 100" {
			t.Errorf("events.k8s.io view: %q", out)
		}
		if out := c.mustKubectl(ctx, "get", "events", "event-test", "-n", ns, "-o", "jsonpath={.apiVersion} {.message} {.series.count} {.metadata.uid}"); out != "v1 This is event-test 100 "+string(created.UID) {
			t.Errorf("core/v1 view (kubectl's default group for events): %q", out)
		}

		if err := events.Delete(ctx, "event-test", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if listed(t, all, "event-test") || listed(t, events, "event-test") {
			t.Error("the event is still listed after its delete")
		}
	})

	t.Run("a collection of events is deleted", func(t *testing.T) {
		for _, name := range []string{"test-event-1", "test-event-2", "test-event-3"} {
			if _, err := events.Create(ctx, newEvent(name, "testevent-set"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		list, err := events.List(ctx, metav1.ListOptions{LabelSelector: "testevent-set=true"})
		if err != nil || len(list.Items) != 3 {
			t.Fatalf("list: %v %+v", err, list)
		}
		if err := events.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "testevent-set=true"}); err != nil {
			t.Fatal(err)
		}
		if list, err := events.List(ctx, metav1.ListOptions{LabelSelector: "testevent-set=true"}); err != nil || len(list.Items) != 0 {
			t.Errorf("left: %v %+v", err, list)
		}
	})

	t.Run("kubectl api-resources lists events in both groups", func(t *testing.T) {
		out := c.mustKubectl(ctx, "api-resources", "--api-group=events.k8s.io")
		if !regexp.MustCompile(`(?m)^events\s+ev\s+events.k8s.io/v1\s+true\s+Event$`).MatchString(out) {
			t.Errorf("kubectl api-resources --api-group=events.k8s.io:\n%s", out)
		}
	})
}

// TestRuntimeClasses walks through the conformance suite's RuntimeClass tests
// (test/e2e/common/node/runtimeclass.go) with client-go and the real kubectl against
// skiff with the sim runtime: the API operations; a pod naming a missing or deleted
// RuntimeClass refused; a pod of a class without overhead scheduled with none, one of a
// class with overhead scheduled with the class's; and, beyond conformance, a pod of a
// class whose handler the runtime has Running, and one whose handler it lacks Pending
// with a FailedCreatePodSandBox event naming the handler.
func TestRuntimeClasses(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ns := "runtimeclass-e2e"
	c.mustKubectl(ctx, "create", "namespace", ns)
	classes := c.Client.NodeV1().RuntimeClasses()
	pods := c.Client.CoreV1().Pods(ns)
	createClass := func(t *testing.T, name, handler string, overhead corev1.ResourceList) {
		t.Helper()
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: handler}
		if overhead != nil {
			rc.Overhead = &nodev1.Overhead{PodFixed: overhead}
		}
		if _, err := classes.Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newPod := func(class string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "test-runtimeclass-" + class + "-"},
			Spec: corev1.PodSpec{
				RuntimeClassName: ptr.To(class),
				Containers:       []corev1.Container{{Name: "test", Image: "busybox:1.36", Command: []string{"sleep", "3600"}}},
				RestartPolicy:    corev1.RestartPolicyNever, AutomountServiceAccountToken: ptr.To(false),
			},
		}
	}
	scheduled := func(t *testing.T, name string) *corev1.Pod {
		t.Helper()
		var pod *corev1.Pod
		eventually(t, 90*time.Second, func() (bool, string) {
			var err error
			pod, err = pods.Get(ctx, name, metav1.GetOptions{})
			return err == nil && pod.Spec.NodeName != "", "pod not scheduled"
		})
		return pod
	}
	eventually(t, 2*time.Minute, func() (bool, string) {
		out, _ := c.kubectl(ctx, "get", "node", "e2e-sim", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		return out == "True", "node Ready: " + out
	})

	t.Run("API operations", func(t *testing.T) {
		dir := t.TempDir()
		manifest := filepath.Join(dir, "rc.yaml")
		if err := os.WriteFile(manifest, []byte("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: conformance-runtime-class\n  labels:\n    test: rc\nhandler: conformance-handler\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := c.mustKubectl(ctx, "create", "-f", manifest); !strings.Contains(out, "runtimeclass.node.k8s.io/conformance-runtime-class created") {
			t.Errorf("kubectl create: %s", out)
		}
		if _, err := classes.Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "conformance-runtime-class"}, Handler: "x"}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v", err)
		}
		out := c.mustKubectl(ctx, "get", "runtimeclasses")
		if !regexp.MustCompile(`NAME\s+HANDLER\s+AGE`).MatchString(out) || !regexp.MustCompile(`conformance-runtime-class\s+conformance-handler\s`).MatchString(out) {
			t.Errorf("kubectl get runtimeclasses:\n%s", out)
		}
		c.mustKubectl(ctx, "annotate", "runtimeclass", "conformance-runtime-class", "patched=true")
		rc, err := classes.Get(ctx, "conformance-runtime-class", metav1.GetOptions{})
		if err != nil || rc.Annotations["patched"] != "true" {
			t.Fatalf("get: %v %+v", err, rc)
		}
		rc.Annotations["updated"] = "true"
		if _, err := classes.Update(ctx, rc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := classes.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test=rc"}); err != nil {
			t.Fatal(err)
		}
		if list, err := classes.List(ctx, metav1.ListOptions{LabelSelector: "test=rc"}); err != nil || len(list.Items) != 0 {
			t.Errorf("left: %v %+v", err, list)
		}
	})

	t.Run("a pod requesting a non-existent RuntimeClass is rejected", func(t *testing.T) {
		_, err := pods.Create(ctx, newPod(ns+"-nonexistent"), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `pod rejected: RuntimeClass "`+ns+`-nonexistent" not found`) {
			t.Errorf("got %v, want 403", err)
		}
		out, err := c.kubectl(ctx, "run", "nope", "-n", ns, "--image=busybox:1.36", "--overrides", `{"spec":{"runtimeClassName":"nope"}}`)
		if err == nil || !strings.Contains(out, `pods "nope" is forbidden: pod rejected: RuntimeClass "nope" not found`) {
			t.Errorf("kubectl run: %v\n%s", err, out)
		}
	})

	t.Run("a pod requesting a deleted RuntimeClass is rejected", func(t *testing.T) {
		createClass(t, ns+"-delete-me", "runc", nil)
		if err := classes.Delete(ctx, ns+"-delete-me", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Create(ctx, newPod(ns+"-delete-me"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("got %v, want 403", err)
		}
	})

	t.Run("a pod of a class without overhead is scheduled with none", func(t *testing.T) {
		createClass(t, "preconfigured-handler", "test-handler", nil)
		created, err := pods.Create(ctx, newPod("preconfigured-handler"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod := scheduled(t, created.Name); len(pod.Spec.Overhead) != 0 {
			t.Errorf("overhead %v", pod.Spec.Overhead)
		}
		// The sim runtime has no handler "test-handler": the sandbox fails, saying so.
		eventually(t, 60*time.Second, func() (bool, string) {
			list, err := core(c).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + created.Name + ",reason=FailedCreatePodSandBox"})
			return err == nil && len(list.Items) > 0 && strings.Contains(list.Items[0].Message, `no runtime for "test-handler" is configured`),
				"no FailedCreatePodSandBox event naming the handler"
		})
		if pod, err := pods.Get(ctx, created.Name, metav1.GetOptions{}); err != nil || pod.Status.Phase != corev1.PodPending {
			t.Errorf("pod phase: %v %v", err, pod.Status.Phase)
		}
	})

	t.Run("a pod of a class with overhead is scheduled with the class's", func(t *testing.T) {
		createClass(t, "with-overhead", "test-handler", corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1Mi"),
		})
		created, err := pods.Create(ctx, newPod("with-overhead"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := scheduled(t, created.Name)
		if cpu, mem := pod.Spec.Overhead[corev1.ResourceCPU], pod.Spec.Overhead[corev1.ResourceMemory]; !cpu.Equal(resource.MustParse("10m")) || !mem.Equal(resource.MustParse("1Mi")) {
			t.Errorf("overhead %v", pod.Spec.Overhead)
		}
	})

	t.Run("a pod of a class whose handler the runtime has runs", func(t *testing.T) {
		createClass(t, "sim", "skiff-sim", nil)
		created, err := pods.Create(ctx, newPod("sim"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 90*time.Second, func() (bool, string) {
			pod, err := pods.Get(ctx, created.Name, metav1.GetOptions{})
			return err == nil && pod.Status.Phase == corev1.PodRunning, "pod not Running"
		})
	})
}

// core is the cluster's core/v1 events client in every namespace.
func core(c *cluster) interface {
	List(context.Context, metav1.ListOptions) (*corev1.EventList, error)
} {
	return c.Client.CoreV1().Events("")
}
