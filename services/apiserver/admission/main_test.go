package admission_test

import (
	"context"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// etcdClient talks to the one real embedded etcd the package's tests share; each test
// keeps to namespaces of its own.
var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &etcdClient))
}

// stores are the real pods and serviceaccounts registries over the shared etcd.
type stores struct {
	pods, serviceAccounts *registry.Store
}

func newStores() stores {
	podDescriptor := pod.NewDescriptor(nil)
	saDescriptor := serviceaccount.NewDescriptor(serviceaccount.TokenConfig{})
	return stores{
		pods:            podDescriptor.NewStore(etcd3.New(etcdClient, scheme.StorageCodec, podDescriptor.NewFunc)),
		serviceAccounts: saDescriptor.NewStore(etcd3.New(etcdClient, scheme.StorageCodec, saDescriptor.NewFunc)),
	}
}

// create stores obj in namespace and returns it as stored.
func create(t *testing.T, store *registry.Store, namespace string, obj runtime.Object) runtime.Object {
	t.Helper()
	out, err := store.Create(context.Background(), namespace, obj, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return out
}

// asUser is a request context of user name in groups.
func asUser(name string, groups ...string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name, Groups: groups})
}

func newPod(namespace, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
}
