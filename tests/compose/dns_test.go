package compose

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestComposeClusterDNS brings compose.yaml's stack up and resolves
// Services through its coredns container (the official image name, CoreDNS's kubernetes
// plugin reading the apiserver as system:coredns): the kube-dns Service and its
// endpoints the kube-dns one-shot writes, then busybox's nslookup in a pod (the
// process runtime runs it in the kubelet's container) asking the endpoint for a Service.
func TestComposeClusterDNS(t *testing.T) {
	if os.Getenv("SKIFF_COMPOSE_TEST") != "1" {
		t.Skip("the compose suite runs with SKIFF_COMPOSE_TEST=1 (make test-compose)")
	}
	s := newStack(t)
	s.testUp(t)
	s.waitReadyNodes(t, initialKubelets)

	var endpointIP string
	s.eventually(t, 2*time.Minute, "kube-dns Service and endpoints", func(ctx context.Context) error {
		svc, err := s.client.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if svc.Spec.ClusterIP != "10.96.0.10" {
			return fmt.Errorf("kube-dns clusterIP %s, want 10.96.0.10", svc.Spec.ClusterIP)
		}
		ep, err := s.client.CoreV1().Endpoints("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(ep.Subsets) != 1 || len(ep.Subsets[0].Addresses) != 1 || ep.Subsets[0].Ports[0].Port != 53 {
			return fmt.Errorf("kube-dns endpoints %+v", ep.Subsets)
		}
		endpointIP = ep.Subsets[0].Addresses[0].IP
		return nil
	})
	if _, err := s.kubectl(s.ctx, "", "create", "service", "clusterip", "web", "--tcp=80:8080"); err != nil {
		t.Fatal(err)
	}
	web, err := s.client.CoreV1().Services("default").Get(s.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kubectl(s.ctx, "", "run", "dnsclient", "--image=busybox", "--command", "--", "sleep", "3600"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"web.default.svc.cluster.local":          web.Spec.ClusterIP,
		"kube-dns.kube-system.svc.cluster.local": "10.96.0.10",
	} {
		// A name asked before CoreDNS's watch brings it is NXDOMAIN, cached up to 30 s.
		s.eventually(t, 2*time.Minute, "nslookup "+name, func(ctx context.Context) error {
			out, err := s.kubectl(ctx, "", "exec", "dnsclient", "--", "nslookup", name, endpointIP)
			if err != nil {
				return err
			}
			if !strings.Contains(out, "Address: "+want) && !strings.Contains(out, "Address 1: "+want) {
				return fmt.Errorf("nslookup %s printed %q, want %s", name, out, want)
			}
			return nil
		})
	}
	s.testDown(t)
}
