package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// BenchmarkCreatePod measures pod creates through the whole apiserver stack (HTTP,
// decoding, admission, defaulting, validation, a real etcd Txn, encoding) from one
// client, and reports creates/s.
func BenchmarkCreatePod(b *testing.B) {
	srv := controlplanetest.StartServer(b)
	url := srv.URL + "/api/v1/namespaces/default/pods"
	client := srv.HTTPClient()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		body := fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p-%d"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`, i)
		resp, err := client.Post(url, "application/json", bytes.NewBufferString(body))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatalf("create: %d", resp.StatusCode)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "creates/s")
}

// BenchmarkListPods measures a LIST of 10,000 pods decoded by client-go: consistent
// (resourceVersion "": etcd's revision, then the watch cache), from the cache as it is
// ("0"), and paged 500 at a time as kubectl lists (each page a range read from etcd).
func BenchmarkListPods(b *testing.B) {
	srv := controlplanetest.StartServer(b)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx := context.Background()
	const pods = 10000
	for i := 0; i < pods; i++ {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i)},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i%100), Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	for _, rv := range []string{"", "0"} {
		b.Run("resourceVersion="+rv, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{ResourceVersion: rv})
				if err != nil || len(list.Items) != pods {
					b.Fatalf("list: %v", err)
				}
			}
		})
	}
	b.Run("limit=500", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			n := 0
			opts := metav1.ListOptions{Limit: 500}
			for {
				list, err := cs.CoreV1().Pods("default").List(ctx, opts)
				if err != nil {
					b.Fatalf("list: %v", err)
				}
				n += len(list.Items)
				if opts.Continue = list.Continue; opts.Continue == "" {
					break
				}
			}
			if n != pods {
				b.Fatalf("paged list: %d pods, want %d", n, pods)
			}
		}
	})
}
