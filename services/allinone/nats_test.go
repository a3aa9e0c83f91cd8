package allinone_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/allinone"
	"skiff.dev/services/internal/pki"
)

// TestEventsTravelOverMutualTLS: the embedded NATS admits only certificates from the
// cluster CA, each only to its own subjects, and still every component's events arrive
// through it — the scheduler's, csr-signer's (on a person's request it leaves pending),
// the kubelet's and a hollow node's (whose certificate came from its own CSR), each
// reported as its own node — since with NATS on nothing POSTs them.
func TestEventsTravelOverMutualTLS(t *testing.T) {
	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cluster, stopped, err := allinone.Start(ctx, allinone.Config{
		DataDir: dataDir, BindAddress: "127.0.0.1", Runtime: allinone.RuntimeSim, NodeName: "nats-node", NATSPort: 0, HollowNodes: 1,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := stopped(); err != nil {
			t.Errorf("all-in-one stopped with %v", err)
		}
	})

	ca, err := pki.LoadCA(filepath.Join(dataDir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"plain":                   nil,
		"TLS without certificate": {nats.Secure(&tls.Config{RootCAs: ca.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12})},
	} {
		nc, err := nats.Connect(cluster.NATSURL, append(opts, nats.Timeout(5*time.Second), nats.NoReconnect())...)
		if err == nil {
			nc.Close()
			t.Errorf("%s client connected to the embedded NATS", name)
		}
	}

	restConfig, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restConfig)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "evented", Namespace: "default"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, personCSR(t, "jane"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"default-scheduler": false, "kubelet nats-node": false, "kubelet hollow-0": false, "csr-signer": false}
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if lastErr = err; err == nil {
			for _, ev := range list.Items {
				source := ev.Source.Component
				if source == "kubelet" {
					if ev.ReportingInstance != ev.Source.Host {
						t.Errorf("kubelet event %s/%s: reportingInstance %q, source.host %q; want both the node", ev.Namespace, ev.Name, ev.ReportingInstance, ev.Source.Host)
					}
					source += " " + ev.Source.Host
				}
				if _, ok := want[source]; ok {
					want[source] = true
				}
			}
		}
		for _, arrived := range want {
			if !arrived {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("events arrived from %v (last error %v); want all", want, lastErr)
	}
}

// personCSR is a request for a person's client certificate (CN name), which csr-signer
// leaves for a person to approve.
func personCSR(t *testing.T, name string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: name}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
}
