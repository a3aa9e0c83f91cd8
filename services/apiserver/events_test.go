package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// newEventsV1Event is the event the conformance suite's Events API tests create
// (test/e2e/instrumentation/events.go).
func newEventsV1Event(namespace, name, label string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
		Regarding:           corev1.ObjectReference{Namespace: namespace},
		EventTime:           metav1.MicroTime{Time: time.Unix(1505828956, 0)},
		Note:                "This is " + name,
		Action:              "Do",
		Reason:              "Test",
		Type:                "Normal",
		ReportingController: "test-controller",
		ReportingInstance:   "test-node",
	}
}

// TestEventsServedInBothGroups covers events.k8s.io/v1 events as the conformance suite's
// Events API tests use them: one stored object seen through events.k8s.io/v1 and core/v1
// with the same name, uid and resourceVersion; field selectors in each group's names;
// strategic merge patch and update of the series with the object read back unchanged
// otherwise; events.k8s.io's validation; delete and delete-collection; watch; discovery
// and kubectl's Table.
func TestEventsServedInBothGroups(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	ns := "default"
	events, core := cs.EventsV1().Events(ns), cs.CoreV1().Events(ns)

	w, err := events.Watch(ctx, metav1.ListOptions{LabelSelector: "testevent-constant=true"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := events.Create(ctx, newEventsV1Event(ns, "event-test", "testevent-constant"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got, ok := ev.Object.(*eventsv1.Event); ev.Type != watch.Added || !ok || got.Name != "event-test" || got.Note != "This is event-test" {
			t.Errorf("watch: %s %#v", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Error("no watch event for the create")
	}

	t.Run("one object, two views", func(t *testing.T) {
		c, err := core.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.UID != created.UID || c.ResourceVersion != created.ResourceVersion || c.Message != "This is event-test" ||
			c.InvolvedObject.Namespace != ns || c.ReportingController != "test-controller" || !c.EventTime.Equal(&created.EventTime) {
			t.Errorf("core/v1 view %+v of %+v", c, created)
		}
		// And the other way: a core/v1 event is an events.k8s.io/v1 one.
		coreEvent := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "core-made"}, InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: ns},
			Reason: "Made", Message: "through core/v1", Source: corev1.EventSource{Component: "kubelet", Host: "n1"}, Count: 3, Type: "Normal",
			FirstTimestamp: metav1.NewTime(time.Unix(1505828000, 0)), LastTimestamp: metav1.NewTime(time.Unix(1505828900, 0))}
		made, err := core.Create(ctx, coreEvent, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := events.Get(ctx, "core-made", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v.UID != made.UID || v.ResourceVersion != made.ResourceVersion || v.Note != "through core/v1" || v.Regarding.Name != "p" ||
			v.DeprecatedSource.Host != "n1" || v.DeprecatedCount != 3 || !v.DeprecatedLastTimestamp.Equal(&made.LastTimestamp) {
			t.Errorf("events.k8s.io/v1 view %+v of %+v", v, made)
		}
		if err := core.Delete(ctx, "core-made", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("listed in the namespace and across namespaces", func(t *testing.T) {
		for _, client := range []interface {
			List(context.Context, metav1.ListOptions) (*eventsv1.EventList, error)
		}{events, cs.EventsV1().Events("")} {
			list, err := client.List(ctx, metav1.ListOptions{LabelSelector: "testevent-constant=true"})
			if err != nil || len(list.Items) != 1 || list.Items[0].Name != "event-test" || list.ResourceVersion == "" {
				t.Errorf("list: %v %+v", err, list)
			}
		}
	})

	t.Run("field selectors in each group's names", func(t *testing.T) {
		coreList, err := core.List(ctx, metav1.ListOptions{FieldSelector: "source=test-controller"})
		if err != nil || len(coreList.Items) != 1 || coreList.Items[0].Name != "event-test" {
			t.Errorf("core/v1 source=: %v %+v", err, coreList)
		}
		list, err := events.List(ctx, metav1.ListOptions{FieldSelector: "reportingController=test-controller"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Name != "event-test" {
			t.Errorf("events.k8s.io/v1 reportingController=: %v %+v", err, list)
		}
		list, err = events.List(ctx, metav1.ListOptions{FieldSelector: "regarding.namespace=" + ns + ",type=Normal"})
		if err != nil || len(list.Items) != 1 {
			t.Errorf("events.k8s.io/v1 regarding.namespace=: %v %+v", err, list)
		}
		_, err = events.List(ctx, metav1.ListOptions{FieldSelector: "source=test-controller"})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "field label not supported: source") {
			t.Errorf("events.k8s.io/v1 source=: got %v, want 400 field label not supported", err)
		}
	})

	t.Run("patched and updated, read back as written", func(t *testing.T) {
		testEvent, err := events.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldData, _ := json.Marshal(testEvent)
		newEvent := testEvent.DeepCopy()
		series := &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.MicroTime{Time: time.Unix(1505828951, 0)}}
		newEvent.Series = series
		newData, _ := json.Marshal(newEvent)
		patch, err := strategicpatch.CreateTwoWayMergePatch(oldData, newData, eventsv1.Event{})
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
			t.Errorf("patched:\n got %+v\nwant %+v", got, testEvent)
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
			t.Errorf("updated:\n got %+v\nwant %+v", got, testEvent)
		}
		if c, err := core.Get(ctx, "event-test", metav1.GetOptions{}); err != nil || c.Series == nil || c.Series.Count != 100 {
			t.Errorf("core/v1 after the update: %v %+v", err, c)
		}
	})

	t.Run("events.k8s.io/v1 validation in kube's words", func(t *testing.T) {
		bad := newEventsV1Event(ns, "no-time", "x")
		bad.EventTime = metav1.MicroTime{}
		bad.ReportingInstance = ""
		_, err := events.Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `Event "no-time" is invalid`) || !strings.Contains(err.Error(), "eventTime: Required value") {
			t.Errorf("create without eventTime: %v", err)
		}
		long := newEventsV1Event(ns, "long-note", "x")
		long.Note = strings.Repeat("n", 1025)
		if _, err := events.Create(ctx, long, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "message: Invalid value: \"\": can have at most 1024 characters") {
			t.Errorf("create with a 1025-byte note: %v", err)
		}
		noController := newEventsV1Event(ns, "no-controller", "x")
		noController.ReportingController = ""
		if _, err := events.Create(ctx, noController, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "reportingController: Required value") {
			t.Errorf("create without reportingController: %v", err)
		}
		current, err := events.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		current.Note = "changed"
		if _, err := events.Update(ctx, current, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "message: Invalid value") || !strings.Contains(err.Error(), "field is immutable") {
			t.Errorf("update of the note: %v", err)
		}
		// Through core/v1 the same change is a legacy event's: allowed.
		c, err := core.Get(ctx, "event-test", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.Message = "changed through core/v1"
		if _, err := core.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Errorf("core/v1 update of the message: %v", err)
		}
	})

	t.Run("kubectl's Table has kube's event columns", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/apis/events.k8s.io/v1/namespaces/default/events?includeObject=Object", nil)
		req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
		resp, err := srv.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var table struct {
			metav1.Table
			Rows []struct {
				Cells  []interface{}   `json:"cells"`
				Object json.RawMessage `json:"object"`
			} `json:"rows"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&table); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range table.ColumnDefinitions {
			if c.Priority == 0 {
				names = append(names, strings.ToUpper(c.Name))
			}
		}
		if got := strings.Join(names, " "); got != "LAST SEEN TYPE REASON OBJECT MESSAGE" {
			t.Errorf("columns %q", got)
		}
		if len(table.Rows) != 1 || table.Rows[0].Cells[2] != "Test" || !strings.Contains(string(table.Rows[0].Object), `"apiVersion":"events.k8s.io/v1"`) ||
			!strings.Contains(string(table.Rows[0].Object), `"note":"changed through core/v1"`) {
			t.Errorf("rows %+v", table.Rows)
		}
	})

	t.Run("discovery lists events in events.k8s.io/v1", func(t *testing.T) {
		resources, err := cs.Discovery().ServerResourcesForGroupVersion("events.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		if len(resources.APIResources) != 1 || resources.APIResources[0].Name != "events" || !resources.APIResources[0].Namespaced ||
			strings.Join(resources.APIResources[0].Verbs, ",") != "create,delete,deletecollection,get,list,patch,update,watch" {
			t.Errorf("resources %+v", resources.APIResources)
		}
	})

	t.Run("deleted one by one and by collection", func(t *testing.T) {
		if err := events.Delete(ctx, "event-test", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := core.Get(ctx, "event-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), `events "event-test" not found`) {
			t.Errorf("core/v1 get after the delete: %v", err)
		}
		for _, name := range []string{"test-event-1", "test-event-2", "test-event-3"} {
			if _, err := events.Create(ctx, newEventsV1Event(ns, name, "testevent-set"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := events.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "testevent-set=true"}); err != nil {
			t.Fatal(err)
		}
		if list, err := core.List(ctx, metav1.ListOptions{LabelSelector: "testevent-set=true"}); err != nil || len(list.Items) != 0 {
			t.Errorf("left after delete-collection: %v %+v", err, list)
		}
	})
}
