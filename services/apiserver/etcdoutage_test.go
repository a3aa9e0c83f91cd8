package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"skiff.dev/services/controlplanetest"
)

// TestAPIServerRidesOutAnEtcdRestart stops etcd under a running apiserver and starts it
// again (every service retries its peers and recovers without a restart). The
// apiserver is never restarted: /readyz fails while etcd is gone and passes once it is
// back, a create sent during the outage completes with a 201 once etcd answers, and a
// watch from a resourceVersion taken before the outage delivers each later event once,
// in order.
func TestAPIServerRidesOutAnEtcdRestart(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	httpClient := srv.HTTPClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cms := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault)
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	before, err := cms.Create(ctx, cm("before"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, before.ResourceVersion, &cache.ListWatch{
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return cms.Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Stop()

	readyz := func() int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/readyz", nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	srv.StopEtcd()
	for readyz() == http.StatusOK {
		if ctx.Err() != nil {
			t.Fatal("/readyz stays 200 with etcd stopped")
		}
		time.Sleep(100 * time.Millisecond)
	}

	created := make(chan error, 1)
	go func() {
		_, err := cms.Create(ctx, cm("during"), metav1.CreateOptions{})
		created <- err
	}()
	srv.StartEtcd()
	if err := <-created; err != nil {
		t.Fatalf("create sent while etcd was down: %v", err)
	}
	if _, err := cms.Create(ctx, cm("after"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after etcd is back: %v", err)
	}
	for readyz() != http.StatusOK {
		if ctx.Err() != nil {
			t.Fatal("/readyz never passes again after etcd is back")
		}
		time.Sleep(100 * time.Millisecond)
	}

	var got []string
	for len(got) < 2 {
		select {
		case ev := <-rw.ResultChan():
			if ev.Type == watch.Bookmark {
				continue
			}
			obj, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				t.Fatalf("watch event %s: %#v", ev.Type, ev.Object)
			}
			got = append(got, fmt.Sprintf("%s %s", ev.Type, obj.Name))
		case <-ctx.Done():
			t.Fatalf("the watch from resourceVersion %s delivered only %v", before.ResourceVersion, got)
		}
	}
	want := []string{"ADDED during", "ADDED after"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watch from before the outage delivered %v, want %v", got, want)
	}
	select {
	case ev := <-rw.ResultChan():
		if ev.Type != watch.Bookmark {
			t.Errorf("an extra watch event: %s %#v", ev.Type, ev.Object)
		}
	default:
	}
}
