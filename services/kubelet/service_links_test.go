package kubelet

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestServiceLinks(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, svc := range []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.1", Ports: []v1.ServicePort{{Name: "https", Port: 443}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.20", Ports: []v1.ServicePort{{Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "headless"}, Spec: v1.ServiceSpec{ClusterIP: v1.ClusterIPNone, Ports: []v1.ServicePort{{Port: 80}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "db"}, Spec: v1.ServiceSpec{ClusterIP: "10.96.0.30", Ports: []v1.ServicePort{{Port: 5432}}}},
	} {
		if err := indexer.Add(svc); err != nil {
			t.Fatal(err)
		}
	}
	synced := false
	kl := newTestKubelet()
	kl.serviceLister = corelisters.NewServiceLister(indexer)
	kl.serviceHasSynced = func() bool { return synced }
	pod := func(links *bool) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "p"}, Spec: v1.PodSpec{EnableServiceLinks: links}}
	}

	if _, err := kl.serviceEnvVars(pod(nil)); err == nil || !strings.Contains(err.Error(), "services have not yet been read at least once") {
		t.Fatalf("before the Services are read: err %v", err)
	}
	synced = true
	env, err := kl.serviceEnvVars(pod(nil))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.1:443", "WEB_SERVICE_HOST": "10.96.0.20", "WEB_PORT_80_TCP_ADDR": "10.96.0.20",
	} {
		if env[name] != want {
			t.Errorf("%s = %q, want %q", name, env[name], want)
		}
	}
	for name := range env {
		if strings.HasPrefix(name, "HEADLESS_") || strings.HasPrefix(name, "DB_") {
			t.Errorf("%s: a headless Service or another namespace's gives no variables", name)
		}
	}
	// enableServiceLinks: false keeps only the kubernetes Service's.
	env, err = kl.serviceEnvVars(pod(ptr.To(false)))
	if err != nil {
		t.Fatal(err)
	}
	if env["KUBERNETES_SERVICE_HOST"] != "10.96.0.1" || env["WEB_SERVICE_HOST"] != "" {
		t.Errorf("enableServiceLinks false: %v", env)
	}
}
