package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// corev1PVSpec is an inline volume spec, as the attach/detach controller writes one for a
// migrated in-tree volume: a CSI source, access modes, no capacity.
var corev1PVSpec = corev1.PersistentVolumeSpec{
	AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
	PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "csi.example.com", VolumeHandle: "vol-1"}},
}

// csiTable reads resource (in namespace, "" for all or cluster-scoped) as kubectl does,
// a meta.k8s.io Table, and returns its column names and rows' cells.
func csiTable(t *testing.T, cs kubernetes.Interface, namespace, resource string) ([]string, [][]interface{}) {
	t.Helper()
	req := cs.StorageV1().RESTClient().Get().Resource(resource)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	body, err := req.SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	var rows [][]interface{}
	for _, r := range table.Rows {
		rows = append(rows, r.Cells)
	}
	return names, rows
}

// TestCSIStorageAPIs covers storage.k8s.io/v1 csidrivers, csinodes, csistoragecapacities
// and volumeattachments over HTTP with client-go: discovery, the operations the
// conformance suite's lifecycle specs run (create, 409, get, patch, update, list and
// watch by label, delete, deletecollection), kube's defaults, each validation error's
// 422, immutable fields, volumeattachments/status, and kubectl's columns.
func TestCSIStorageAPIs(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()

	t.Run("discovery", func(t *testing.T) {
		list, err := cs.Discovery().ServerResourcesForGroupVersion("storage.k8s.io/v1")
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]metav1.APIResource{}
		for _, r := range list.APIResources {
			got[r.Name] = r
		}
		for name, namespaced := range map[string]bool{"csidrivers": false, "csinodes": false, "csistoragecapacities": true,
			"storageclasses": false, "volumeattachments": false, "volumeattachments/status": false} {
			r, ok := got[name]
			if !ok {
				t.Errorf("%s not served: %+v", name, list.APIResources)
				continue
			}
			if r.Namespaced != namespaced || (name != "storageclasses" && len(r.ShortNames) != 0) {
				t.Errorf("%s: namespaced %v, short names %v", name, r.Namespaced, r.ShortNames)
			}
		}
		if v := got["volumeattachments/status"].Verbs; strings.Join(v, ",") != "get,patch,update" {
			t.Errorf("volumeattachments/status verbs %v", v)
		}
	})

	t.Run("CSIDriver lifecycle", func(t *testing.T) {
		drivers := cs.StorageV1().CSIDrivers()
		label := map[string]string{"e2e-test": "csidriver"}
		newDriver := func(name string, modes ...storagev1.VolumeLifecycleMode) *storagev1.CSIDriver {
			return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: label},
				Spec: storagev1.CSIDriverSpec{VolumeLifecycleModes: modes}}
		}
		d1, err := drivers.Create(ctx, newDriver("inline-driver-1.example.com", storagev1.VolumeLifecycleEphemeral), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := d1.Spec
		if !ptr.Deref(s.AttachRequired, false) || ptr.Deref(s.PodInfoOnMount, true) || ptr.Deref(s.StorageCapacity, true) ||
			ptr.Deref(s.RequiresRepublish, true) || ptr.Deref(s.SELinuxMount, true) ||
			ptr.Deref(s.FSGroupPolicy, "") != storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy ||
			len(s.VolumeLifecycleModes) != 1 || s.VolumeLifecycleModes[0] != storagev1.VolumeLifecycleEphemeral {
			t.Errorf("defaults %+v", s)
		}
		d2 := newDriver("inline-driver-2.example.com")
		d2.Spec.NodeAllocatableUpdatePeriodSeconds = ptr.To[int64](60) // a field 1.32 does not have
		d2, err = drivers.Create(ctx, d2, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(d2.Spec.VolumeLifecycleModes) != 1 || d2.Spec.VolumeLifecycleModes[0] != storagev1.VolumeLifecyclePersistent ||
			d2.Spec.NodeAllocatableUpdatePeriodSeconds != nil {
			t.Errorf("created %+v", d2.Spec)
		}
		if _, err := drivers.Create(ctx, newDriver(d1.Name), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v", err)
		}
		patched, err := drivers.Patch(ctx, d2.Name, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"`+d2.Name+`":"patched"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Labels[d2.Name] != "patched" {
			t.Fatalf("patch: %v %+v", err, patched)
		}
		patched.Labels[d2.Name] = "updated"
		patched.Spec.PodInfoOnMount = ptr.To(true) // mutable; the generation counts it
		updated, err := drivers.Update(ctx, patched, metav1.UpdateOptions{})
		if err != nil || updated.Labels[d2.Name] != "updated" || updated.Generation != patched.Generation+1 {
			t.Fatalf("update: %v %+v", err, updated)
		}
		if l, err := drivers.List(ctx, metav1.ListOptions{LabelSelector: "e2e-test=csidriver"}); err != nil || len(l.Items) != 2 {
			t.Errorf("list: %v %+v", err, l)
		}

		updated.Spec.AttachRequired = ptr.To(false)
		_, err = drivers.Update(ctx, updated, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "spec.attachedRequired: Invalid value: false: field is immutable")
		updated.Spec.AttachRequired = ptr.To(true)
		updated.Spec.VolumeLifecycleModes = append(updated.Spec.VolumeLifecycleModes, storagev1.VolumeLifecycleEphemeral)
		_, err = drivers.Update(ctx, updated, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "spec.volumeLifecycleModes: Invalid value")
		unconditional := updated.DeepCopy()
		unconditional.Spec.VolumeLifecycleModes, unconditional.ResourceVersion = d2.Spec.VolumeLifecycleModes, ""
		_, err = drivers.Update(ctx, unconditional, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "metadata.resourceVersion: Invalid value: 0: must be specified for an update")

		for _, tc := range []struct {
			change func(*storagev1.CSIDriver)
			want   string
		}{
			{func(d *storagev1.CSIDriver) { d.Name = "Not_A_Name" }, `metadata.name: Invalid value: "Not_A_Name"`},
			{func(d *storagev1.CSIDriver) { d.Spec.FSGroupPolicy = ptr.To(storagev1.FSGroupPolicy("Sometimes")) },
				`spec.fsGroupPolicy: Unsupported value: "Sometimes": supported values: "File", "None", "ReadWriteOnceWithFSType"`},
			{func(d *storagev1.CSIDriver) {
				d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{"Forever"}
			}, `spec.volumeLifecycleModes: Unsupported value: "Forever": supported values: "Persistent", "Ephemeral"`},
			{func(d *storagev1.CSIDriver) {
				d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "a"}, {Audience: "a"}}
			}, `spec.tokenRequests[1].audience: Duplicate value: "a"`},
			{func(d *storagev1.CSIDriver) {
				d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "a", ExpirationSeconds: ptr.To[int64](60)}}
			}, "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"},
			{func(d *storagev1.CSIDriver) {
				d.Spec.TokenRequests = []storagev1.TokenRequest{{Audience: "a", ExpirationSeconds: ptr.To[int64](1<<32 + 1)}}
			}, "may not specify a duration larger than 2^32 seconds"},
		} {
			d := newDriver("invalid.example.com")
			tc.change(d)
			_, err := drivers.Create(ctx, d, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}

		names, rows := csiTable(t, cs, "", "csidrivers")
		if strings.Join(names, " ") != "Name AttachRequired PodInfoOnMount StorageCapacity TokenRequests RequiresRepublish Modes Age" || len(rows) != 2 {
			t.Fatalf("table %v %v", names, rows)
		}
		if r := rows[0]; r[0] != d1.Name || r[1] != true || r[2] != false || r[3] != false || r[4] != "<unset>" || r[5] != false || r[6] != "Ephemeral" {
			t.Errorf("row %v", r)
		}

		if err := drivers.Delete(ctx, d1.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := drivers.Get(ctx, d1.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete: %v", err)
		}
		if err := drivers.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: d2.Name + "=updated"}); err != nil {
			t.Fatal(err)
		}
		if _, err := drivers.Get(ctx, d2.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after deletecollection: %v", err)
		}
	})

	t.Run("protobuf", func(t *testing.T) {
		cfg := rest.CopyConfig(srv.Config)
		cfg.ContentType, cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf"
		pb := kubernetes.NewForConfigOrDie(cfg).StorageV1()
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-protobuf"}, Spec: storagev1.VolumeAttachmentSpec{
			Attacher: "csi.example.com", NodeName: "node-a", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-protobuf")}}}
		if _, err := pb.VolumeAttachments().Create(ctx, va, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if l, err := pb.VolumeAttachments().List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 || l.Items[0].Spec.NodeName != "node-a" {
			t.Errorf("list as protobuf: %v %+v", err, l)
		}
		if err := pb.VolumeAttachments().Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CSINode lifecycle and validation", func(t *testing.T) {
		nodes := cs.StorageV1().CSINodes()
		n, err := nodes.Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "e2e-csinode-a"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nodes.Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"e2e-csinode-a":"patched"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if l, err := nodes.List(ctx, metav1.ListOptions{LabelSelector: "e2e-csinode-a=patched"}); err != nil || len(l.Items) != 1 {
			t.Errorf("list: %v %+v", err, l)
		}
		n, _ = nodes.Get(ctx, n.Name, metav1.GetOptions{})
		n.Spec.Drivers = []storagev1.CSINodeDriver{{Name: "csi.example.com", NodeID: "node-a", TopologyKeys: []string{"topology.example.com/zone"},
			Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](8)}}}
		n, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("adding a driver: %v", err)
		}
		n.Spec.Drivers[0].NodeID = "node-b"
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "CSINodeDriver: Invalid value")
		wantPVInvalid(t, err, "field is immutable")
		n.Spec.Drivers[0].NodeID = "node-a"
		n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "a"})
		if n, err = nodes.Update(ctx, n, metav1.UpdateOptions{}); err != nil || len(n.Spec.Drivers) != 2 {
			t.Fatalf("a second driver: %v", err)
		}

		for _, tc := range []struct {
			driver storagev1.CSINodeDriver
			want   string
		}{
			{storagev1.CSINodeDriver{Name: "csi.example.com"}, "spec.drivers[0].nodeID: Required value"},
			{storagev1.CSINodeDriver{Name: "csi.example.com", NodeID: strings.Repeat("n", 257)}, "spec.drivers[0].nodeID: Invalid value: \"" + strings.Repeat("n", 257) + "\": must be 256 characters or less"},
			{storagev1.CSINodeDriver{Name: "", NodeID: "a"}, "spec.drivers[0].name: Required value"},
			{storagev1.CSINodeDriver{Name: "Bad_Driver", NodeID: "a"}, `spec.drivers[0].name: Invalid value: "Bad_Driver"`},
			{storagev1.CSINodeDriver{Name: strings.Repeat("d", 64), NodeID: "a"}, "spec.drivers[0].name: Too long: may not be more than 63 bytes"},
			{storagev1.CSINodeDriver{Name: "csi.example.com", NodeID: "a", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](-1)}},
				"spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0"},
			{storagev1.CSINodeDriver{Name: "csi.example.com", NodeID: "a", TopologyKeys: []string{"zone", "zone"}}, `spec.drivers[0]: Duplicate value: "zone"`},
			{storagev1.CSINodeDriver{Name: "csi.example.com", NodeID: "a", TopologyKeys: []string{"not a key"}}, `spec.drivers[0]: Invalid value: "not a key"`},
		} {
			_, err := nodes.Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "invalid"},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{tc.driver}}}, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}
		_, err = nodes.Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "invalid"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
			{Name: "csi.example.com", NodeID: "a"}, {Name: "csi.example.com", NodeID: "b"}}}}, metav1.CreateOptions{})
		wantPVInvalid(t, err, `spec.drivers[1].name: Duplicate value: "csi.example.com"`)

		names, rows := csiTable(t, cs, "", "csinodes")
		if strings.Join(names, " ") != "Name Drivers Age" || len(rows) != 1 || rows[0][0] != "e2e-csinode-a" || rows[0][1] != float64(2) {
			t.Errorf("table %v %v", names, rows)
		}
		if err := nodes.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e-csinode-a=patched"}); err != nil {
			t.Fatal(err)
		}
		if l, err := nodes.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
			t.Errorf("left: %v %+v", err, l)
		}
	})

	t.Run("CSIStorageCapacity API operations", func(t *testing.T) {
		ns := "csc"
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		capacities, all := cs.StorageV1().CSIStorageCapacities(ns), cs.StorageV1().CSIStorageCapacities("")
		newCapacity := func(name string) *storagev1.CSIStorageCapacity {
			return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": "csc"}},
				StorageClassName: "e2e.example.com"}
		}
		c1, err := capacities.Create(ctx, newCapacity("csc1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := capacities.Create(ctx, newCapacity("csc1"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Errorf("second create: %v", err)
		}
		if _, err := capacities.Create(ctx, newCapacity("csc2"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		w, err := capacities.Watch(ctx, metav1.ListOptions{LabelSelector: "test=csc"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		wAll, err := all.Watch(ctx, metav1.ListOptions{LabelSelector: "test=csc"})
		if err != nil {
			t.Fatal(err)
		}
		defer wAll.Stop()
		c3 := newCapacity("csc3")
		c3.Capacity, c3.MaximumVolumeSize = ptr.To(resource.MustParse("10Gi")), ptr.To(resource.MustParse("1Gi"))
		c3.NodeTopology = &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "a"}}
		if _, err := capacities.Create(ctx, c3, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if l, err := all.List(ctx, metav1.ListOptions{LabelSelector: "test=csc"}); err != nil || len(l.Items) != 3 {
			t.Errorf("list across namespaces: %v %+v", err, l)
		}
		patched, err := capacities.Patch(ctx, c1.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Annotations["patched"] != "true" {
			t.Fatalf("patch: %v %+v", err, patched)
		}
		patched.Annotations["updated"] = "true"
		if _, err := capacities.Update(ctx, patched, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for name, w := range map[string]watch.Interface{"namespace": w, "all namespaces": wAll} {
			added, modified := false, 0
			for !added || modified < 2 {
				select {
				case ev := <-w.ResultChan():
					if _, ok := ev.Object.(*storagev1.CSIStorageCapacity); !ok {
						t.Fatalf("%s: event %v %T", name, ev.Type, ev.Object)
					}
					added = added || ev.Type == watch.Added
					if ev.Type == watch.Modified {
						modified++
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("%s: no watch events (added %v, modified %d)", name, added, modified)
				}
			}
		}

		got, err := capacities.Get(ctx, "csc1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got.StorageClassName = "other"
		_, err = capacities.Update(ctx, got, metav1.UpdateOptions{})
		wantPVInvalid(t, err, `storageClassName: Invalid value: "other": field is immutable`)
		got.StorageClassName = "e2e.example.com"
		got.NodeTopology = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}
		_, err = capacities.Update(ctx, got, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "nodeTopology: Invalid value")
		for _, tc := range []struct {
			change func(*storagev1.CSIStorageCapacity)
			want   string
		}{
			{func(c *storagev1.CSIStorageCapacity) { c.StorageClassName = "" }, `storageClassName: Invalid value: "": a lowercase RFC 1123 subdomain`},
			{func(c *storagev1.CSIStorageCapacity) { c.StorageClassName = "Fast_SSD" }, `storageClassName: Invalid value: "Fast_SSD"`},
			{func(c *storagev1.CSIStorageCapacity) { c.Capacity = ptr.To(resource.MustParse("-1Gi")) },
				`capacity: Invalid value: "-1Gi": must be greater than or equal to 0`},
			{func(c *storagev1.CSIStorageCapacity) {
				c.NodeTopology = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: "Near"}}}
			}, `nodeTopology.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator`},
		} {
			c := newCapacity("invalid")
			tc.change(c)
			_, err := capacities.Create(ctx, c, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}

		names, rows := csiTable(t, cs, ns, "csistoragecapacities")
		if strings.Join(names, " ") != "Name StorageClassName Capacity" || len(rows) != 3 ||
			fmt.Sprint(rows[0]) != "[csc1 e2e.example.com <unset>]" || fmt.Sprint(rows[2]) != "[csc3 e2e.example.com 10Gi]" {
			t.Errorf("table %v %v", names, rows)
		}

		if err := capacities.Delete(ctx, c1.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if l, err := capacities.List(ctx, metav1.ListOptions{LabelSelector: "test=csc"}); err != nil || len(l.Items) != 2 {
			t.Errorf("after delete: %v %+v", err, l)
		}
		if err := capacities.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test=csc"}); err != nil {
			t.Fatal(err)
		}
		if l, err := capacities.List(ctx, metav1.ListOptions{LabelSelector: "test=csc"}); err != nil || len(l.Items) != 0 {
			t.Errorf("after deletecollection: %v %+v", err, l)
		}
	})

	t.Run("VolumeAttachment lifecycle and status", func(t *testing.T) {
		vas := cs.StorageV1().VolumeAttachments()
		newVA := func(name string) *storagev1.VolumeAttachment {
			return &storagev1.VolumeAttachment{
				ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)},
				Spec: storagev1.VolumeAttachmentSpec{Attacher: "e2e-test.storage.k8s.io", NodeName: "node-a",
					Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + name)}},
				Status: storagev1.VolumeAttachmentStatus{Attached: true},
			}
		}
		va, err := vas.Create(ctx, newVA("va-e2e-1"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if va.Status.Attached || va.UID == "va-e2e-1" {
			t.Errorf("create kept the client's status or UID: %+v", va)
		}
		patched, err := vas.Patch(ctx, va.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"va-e2e-1":"patched"}}}`), metav1.PatchOptions{})
		if err != nil || patched.Labels["va-e2e-1"] != "patched" {
			t.Fatalf("patch: %v %+v", err, patched)
		}

		dyn := dynamic.NewForConfigOrDie(srv.Config).Resource(schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "volumeattachments"})
		u, err := dyn.Get(ctx, va.Name, metav1.GetOptions{}, "status")
		if err != nil {
			t.Fatal(err)
		}
		read := &storagev1.VolumeAttachment{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), read); err != nil || read.Status.Attached {
			t.Errorf("status read: %v %+v", err, read.Status)
		}
		// A status patch changes status alone: the labels and the spec it carries are
		// the stored ones.
		attached, err := vas.Patch(ctx, va.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"sneaky":"true"}},"spec":{"nodeName":"node-b"},"status":{"attached":true,"attachmentMetadata":{"device":"/dev/xvdb"}}}`),
			metav1.PatchOptions{}, "status")
		if err != nil || !attached.Status.Attached || attached.Status.AttachmentMetadata["device"] != "/dev/xvdb" ||
			attached.Labels["sneaky"] != "" || attached.Spec.NodeName != "node-a" {
			t.Fatalf("status patch: %v %+v", err, attached)
		}
		attached.Status.Attached = false
		attached.Status.DetachError = &storagev1.VolumeError{Message: strings.Repeat("x", 1025)}
		_, err = vas.UpdateStatus(ctx, attached, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "status.detachError.message: Too long")
		attached.Status.DetachError = &storagev1.VolumeError{Message: "detach failed", ErrorCode: ptr.To[int32](5)}
		detached, err := vas.UpdateStatus(ctx, attached, metav1.UpdateOptions{})
		if err != nil || detached.Status.Attached || detached.Status.DetachError == nil || detached.Status.DetachError.ErrorCode != nil {
			t.Fatalf("status update: %v %+v", err, detached)
		}
		// The main resource keeps the stored status and refuses a spec change.
		detached.Status.Attached = true
		relabelled, err := vas.Update(ctx, detached, metav1.UpdateOptions{})
		if err != nil || relabelled.Status.Attached {
			t.Fatalf("update: %v %+v", err, relabelled)
		}
		relabelled.Spec.NodeName = "node-b"
		_, err = vas.Update(ctx, relabelled, metav1.UpdateOptions{})
		wantPVInvalid(t, err, "spec: Invalid value")
		wantPVInvalid(t, err, "field is immutable")

		for _, tc := range []struct {
			change func(*storagev1.VolumeAttachment)
			want   string
		}{
			{func(va *storagev1.VolumeAttachment) { va.Spec.Attacher = "" }, "spec.attacher: Required value"},
			{func(va *storagev1.VolumeAttachment) { va.Spec.Attacher = "Not_A_Driver" }, `spec.attacher: Invalid value: "Not_A_Driver"`},
			{func(va *storagev1.VolumeAttachment) { va.Spec.NodeName = "" }, `spec.nodeName: Invalid value: ""`},
			{func(va *storagev1.VolumeAttachment) { va.Spec.Source.PersistentVolumeName = nil },
				"spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"},
			{func(va *storagev1.VolumeAttachment) { va.Spec.Source.PersistentVolumeName = ptr.To("") },
				"spec.source.persistentVolumeName: Required value: must specify non empty persistentVolumeName"},
			{func(va *storagev1.VolumeAttachment) { va.Spec.Source.PersistentVolumeName = ptr.To("PV_1") },
				`spec.source.persistentVolumeName: Invalid value: "PV_1"`},
			{func(va *storagev1.VolumeAttachment) {
				va.Spec.Source.InlineVolumeSpec = &corev1PVSpec
			}, "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"},
			{func(va *storagev1.VolumeAttachment) {
				va.Spec.Source.PersistentVolumeName = nil
				va.Spec.Source.InlineVolumeSpec = corev1PVSpec.DeepCopy()
				va.Spec.Source.InlineVolumeSpec.CSI = nil
			}, "spec.source.inlineVolumeSpec.csi: Required value: has to be specified in the context of inline volumes"},
		} {
			va := newVA("va-invalid")
			tc.change(va)
			_, err := vas.Create(ctx, va, metav1.CreateOptions{})
			wantPVInvalid(t, err, tc.want)
		}
		inline := newVA("va-inline")
		inline.Spec.Source = storagev1.VolumeAttachmentSource{InlineVolumeSpec: corev1PVSpec.DeepCopy()}
		if _, err := vas.Create(ctx, inline, metav1.CreateOptions{}); err != nil {
			t.Errorf("an inline volume: %v", err)
		}

		names, rows := csiTable(t, cs, "", "volumeattachments")
		if strings.Join(names, " ") != "Name Attacher PV Node Attached Age" || len(rows) != 2 ||
			fmt.Sprint(rows[0][:5]) != "[va-e2e-1 e2e-test.storage.k8s.io pv-va-e2e-1 node-a false]" || rows[1][2] != "" {
			t.Errorf("table %v %v", names, rows)
		}

		if err := vas.Delete(ctx, va.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := vas.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if l, err := vas.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
			t.Errorf("left: %v %+v", err, l)
		}
	})
}
