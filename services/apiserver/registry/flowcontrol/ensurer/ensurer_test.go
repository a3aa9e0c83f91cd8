package ensurer_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/flowcontrol/ensurer"
	"skiff.dev/services/apiserver/registry/flowcontrol/flowschema"
	"skiff.dev/services/apiserver/registry/flowcontrol/prioritylevelconfiguration"
	"skiff.dev/services/apiserver/registry/rest"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

var testClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &testClient))
}

type stores map[schema.GroupResource]*registry.Store

func (s stores) Store(gr schema.GroupResource) *registry.Store { return s[gr] }

// newStores are the real flowschemas and prioritylevelconfigurations Stores over an
// emptied etcd prefix.
func newStores(t *testing.T, ctx context.Context) stores {
	t.Helper()
	s := stores{}
	for _, d := range []registry.Descriptor{flowschema.Descriptor, prioritylevelconfiguration.Descriptor} {
		if _, err := testClient.Delete(ctx, d.EtcdPrefix()+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
		s[d.GroupResource()] = d.NewStore(etcd3.New(testClient, scheme.StorageCodec, d.NewFunc))
	}
	return s
}

func ensure(t *testing.T, ctx context.Context, s stores) {
	t.Helper()
	if err := ensurer.EnsureBootstrapConfiguration(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func getFS(t *testing.T, ctx context.Context, s stores, name string) *flowcontrolv1.FlowSchema {
	t.Helper()
	obj, err := s.Store(flowcontrolv1.Resource("flowschemas")).Get(ctx, "", name, &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*flowcontrolv1.FlowSchema).DeepCopy()
}

func getPL(t *testing.T, ctx context.Context, s stores, name string) *flowcontrolv1.PriorityLevelConfiguration {
	t.Helper()
	obj, err := s.Store(flowcontrolv1.Resource("prioritylevelconfigurations")).Get(ctx, "", name, &metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*flowcontrolv1.PriorityLevelConfiguration).DeepCopy()
}

// TestEnsureBootstrapConfiguration: a fresh cluster gets every mandatory and suggested
// object; a deleted mandatory one comes back; a suggested one the user changed comes
// back to the bootstrap spec while it asks to be auto-updated, and keeps the user's
// change once the annotation says "false"; the exempt level keeps its own settings; an
// auto-updated object that is not part of the configuration is deleted, a user's is kept.
func TestEnsureBootstrapConfiguration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newStores(t, ctx)
	fsStore := s.Store(flowcontrolv1.Resource("flowschemas"))
	plStore := s.Store(flowcontrolv1.Resource("prioritylevelconfigurations"))
	ensure(t, ctx, s)

	for _, fs := range append(bootstrap.MandatoryFlowSchemas, bootstrap.SuggestedFlowSchemas...) {
		if got := getFS(t, ctx, s, fs.Name); got.Annotations[flowcontrolv1.AutoUpdateAnnotationKey] != "true" {
			t.Errorf("flowschema %s annotations %v", fs.Name, got.Annotations)
		}
	}
	for _, pl := range append(bootstrap.MandatoryPriorityLevelConfigurations, bootstrap.SuggestedPriorityLevelConfigurations...) {
		getPL(t, ctx, s, pl.Name)
	}

	// A deleted mandatory schema comes back.
	if _, _, err := fsStore.Delete(ctx, "", flowcontrolv1.FlowSchemaNameCatchAll, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A suggested level changed by the user, still auto-updated, and another one the user
	// opted out of.
	workloadLow := getPL(t, ctx, s, "workload-low")
	workloadLow.Spec.Limited.NominalConcurrencyShares = ptr.To(int32(7))
	if _, _, err := plStore.Update(ctx, "", workloadLow.Name, rest.DefaultUpdatedObjectInfo(workloadLow), &metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	globalDefault := getPL(t, ctx, s, "global-default")
	globalDefault.Annotations[flowcontrolv1.AutoUpdateAnnotationKey] = "false"
	globalDefault.Spec.Limited.NominalConcurrencyShares = ptr.To(int32(9))
	if _, _, err := plStore.Update(ctx, "", globalDefault.Name, rest.DefaultUpdatedObjectInfo(globalDefault), &metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	exempt := getPL(t, ctx, s, flowcontrolv1.PriorityLevelConfigurationNameExempt)
	exempt.Spec.Exempt.NominalConcurrencyShares = ptr.To(int32(3))
	if _, _, err := plStore.Update(ctx, "", exempt.Name, rest.DefaultUpdatedObjectInfo(exempt), &metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Two schemas that are not part of the configuration: one marked for auto-update (as
	// a bootstrap object an older version had), one the user's.
	for name, annotations := range map[string]map[string]string{
		"retired": {flowcontrolv1.AutoUpdateAnnotationKey: "true"},
		"users":   nil,
	} {
		fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "global-default"}}}
		if _, err := fsStore.Create(ctx, "", fs, &metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	ensure(t, ctx, s)
	getFS(t, ctx, s, flowcontrolv1.FlowSchemaNameCatchAll)
	if got := *getPL(t, ctx, s, "workload-low").Spec.Limited.NominalConcurrencyShares; got != *bootstrap.SuggestedPriorityLevelConfigurationWorkloadLow.Spec.Limited.NominalConcurrencyShares {
		t.Errorf("workload-low nominalConcurrencyShares %d, want the suggested value back", got)
	}
	if got := *getPL(t, ctx, s, "global-default").Spec.Limited.NominalConcurrencyShares; got != 9 {
		t.Errorf("global-default nominalConcurrencyShares %d, want the user's 9 (auto-update off)", got)
	}
	if got := *getPL(t, ctx, s, "exempt").Spec.Exempt.NominalConcurrencyShares; got != 3 {
		t.Errorf("exempt nominalConcurrencyShares %d, want the user's 3", got)
	}
	if _, err := fsStore.Get(ctx, "", "retired", &metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("retired auto-updated schema: %v, want it deleted", err)
	}
	getFS(t, ctx, s, "users")
}
