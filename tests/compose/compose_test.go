// Package compose brings compose.yaml's full stack up in Docker under a project name of
// its own and drives it as a user does (README "Run the full stack"): the real kubectl
// against the published apiserver port, docker compose to scale and to kill and start a
// service, Jaeger's HTTP API for a pod's trace. Whatever happens, `docker compose down -v`
// runs at the end and the test checks that no container, network or volume is left.
//
// It runs only with SKIFF_COMPOSE_TEST=1 (`make test-compose`, which first builds or
// reuses the images with `make images offline-images`), so `make test` never starts it.
package compose

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/tests/internal/composetest"
)

// Sizes of the scenario.
const (
	initialKubelets = 3
	scaledKubelets  = 5
	spreadPods      = 30
)

// stack is one compose project of compose.yaml (composetest.Stack) with the names the
// tests in this package use.
type stack struct {
	*composetest.Stack
	t          *testing.T
	ctx        context.Context
	project    string
	root       string
	dataDir    string
	kubeconfig string
	jaegerURL  string
	client     kubernetes.Interface
}

func TestComposeStack(t *testing.T) {
	if os.Getenv("SKIFF_COMPOSE_TEST") != "1" {
		t.Skip("the compose suite runs with SKIFF_COMPOSE_TEST=1 (make test-compose)")
	}
	s := newStack(t)

	steps := []struct {
		name string
		run  func(*stack, *testing.T)
	}{
		{"Up", (*stack).testUp},
		{"NodesReadyWithCSRIssuedCertificates", (*stack).testNodesReady},
		{"PodsSpreadAndRun", (*stack).testPodsSpreadAndRun},
		{"EventsOverMutualTLSNATS", (*stack).testEvents},
		{"ExecAndLogs", (*stack).testExecAndLogs},
		{"AttacksFromANodeAreRefused", (*stack).testAttacksFromANode},
		{"PodTraceInJaeger", (*stack).testPodTrace},
		{"ScaleKubelets", (*stack).testScale},
		{"APIServerKillAndStart", (*stack).testAPIServerRestart},
		{"DownLeavesNothing", (*stack).testDown},
	}
	for _, step := range steps {
		// Each step builds on the ones before it: stop at the first that fails.
		if !t.Run(step.name, func(t *testing.T) { step.run(s, t) }) {
			t.FailNow()
		}
	}
}

// newStack checks what the stack needs, names a project of its own, picks free host
// ports and registers the teardown, which runs even when the test fails or panics. Its
// kubelets run the process runtime.
func newStack(t *testing.T) *stack { return newStackWithRuntime(t, "process") }

// newStackWithRuntime is newStack with the kubelets' built-in runtime (SKIFF_RUNTIME:
// process or sim).
func newStackWithRuntime(t *testing.T, criRuntime string) *stack {
	cs := composetest.New(t, composetest.Options{Runtime: criRuntime})
	return &stack{Stack: cs, t: t, ctx: cs.Ctx, project: cs.Project, root: cs.Root, dataDir: cs.DataDir, kubeconfig: cs.Kubeconfig, jaegerURL: cs.JaegerURL}
}

// composeOutput runs `compose -f compose.yaml -p PROJECT args...` and returns its
// combined output.
func (s *stack) composeOutput(ctx context.Context, args ...string) (string, error) {
	return s.ComposeOutput(ctx, args...)
}

// composeRun runs a compose command and fails t when it fails.
func (s *stack) composeRun(t *testing.T, args ...string) { t.Helper(); s.ComposeRun(t, args...) }

// kubectl runs the real kubectl with the stack's admin kubeconfig.
func (s *stack) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return s.Kubectl(ctx, stdin, args...)
}

// eventually calls check every 2 s until it returns nil or timeout passes, then fails t
// with the last error.
func (s *stack) eventually(t *testing.T, timeout time.Duration, what string, check func(context.Context) error) {
	t.Helper()
	s.Eventually(t, timeout, 2*time.Second, what, check)
}

// testUp starts the stack with three kubelets and waits for the admin kubeconfig.
func (s *stack) testUp(t *testing.T) { s.up(t, initialKubelets) }

// up starts the stack with n kubelets and waits for the admin kubeconfig.
func (s *stack) up(t *testing.T, n int) {
	t.Helper()
	s.composeRun(t, "up", "-d", "--no-build", "--scale", fmt.Sprintf("kubelet=%d", n))
	s.eventually(t, 2*time.Minute, "admin kubeconfig and apiserver ready", func(ctx context.Context) error {
		if _, err := os.Stat(s.kubeconfig); err != nil {
			return err
		}
		_, err := s.kubectl(ctx, "", "get", "--raw", "/readyz")
		return err
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "https://127.0.0.1:") {
		t.Errorf("admin kubeconfig server = %q, want the published https://127.0.0.1 port", cfg.Host)
	}
	s.client = kubernetes.NewForConfigOrDie(cfg)
	s.Config, s.Client = cfg, s.client
}

// waitReadyNodes waits until exactly n nodes are Ready and returns their names.
func (s *stack) waitReadyNodes(t *testing.T, n int) []string {
	t.Helper()
	return s.WaitReadyNodes(t, n, 3*time.Minute)
}

// testNodesReady waits for three Ready nodes, each with its own certificate.
func (s *stack) testNodesReady(t *testing.T) {
	s.checkNodeCertificates(t, s.waitReadyNodes(t, initialKubelets))
}

// checkNodeCertificates fails t for each node without a client certificate for
// system:node:<name> issued through an approved CSR (kubelet TLS bootstrap).
func (s *stack) checkNodeCertificates(t *testing.T, nodes []string) {
	t.Helper()
	csrs, err := s.client.CertificatesV1().CertificateSigningRequests().List(s.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issued := map[string]int{} // node name -> certificates issued for it
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || len(csr.Status.Certificate) == 0 {
			continue
		}
		block, _ := pem.Decode(csr.Status.Certificate)
		if block == nil {
			t.Errorf("CSR %s: status.certificate is not PEM", csr.Name)
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Errorf("CSR %s: %v", csr.Name, err)
			continue
		}
		if name, ok := strings.CutPrefix(cert.Subject.CommonName, "system:node:"); ok {
			issued[name]++
		}
	}
	for _, n := range nodes {
		if issued[n] == 0 {
			t.Errorf("node %s: no certificate for system:node:%s issued through a CSR (issued: %v)", n, n, issued)
		}
	}
}

// spreadManifest is a YAML stream of spreadPods pods, each a shell that prints a line and
// sleeps, with a small CPU request so the scheduler's least-allocated score spreads them.
func spreadManifest() string {
	var docs []string
	for i := 0; i < spreadPods; i++ {
		docs = append(docs, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: spread-%d
  labels: {app: spread}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sh, -c, "echo started spread-%d; exec sleep 3600"]
    resources:
      requests: {cpu: 10m, memory: 8Mi}
`, i, i))
	}
	return strings.Join(docs, "---\n")
}

// spreadPods lists the pods of spreadManifest.
func (s *stack) spreadPods(ctx context.Context) (*corev1.PodList, error) {
	return s.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
}

// waitAllRunning waits until all spreadPods pods are Running and returns them.
func (s *stack) waitAllRunning(t *testing.T, timeout time.Duration) *corev1.PodList {
	t.Helper()
	var pods *corev1.PodList
	s.eventually(t, timeout, fmt.Sprintf("%d pods Running", spreadPods), func(ctx context.Context) error {
		list, err := s.spreadPods(ctx)
		if err != nil {
			return err
		}
		running := 0
		var notRunning []string
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			} else if len(notRunning) < 5 {
				notRunning = append(notRunning, fmt.Sprintf("%s=%s", p.Name, p.Status.Phase))
			}
		}
		if len(list.Items) != spreadPods || running != spreadPods {
			return fmt.Errorf("%d pods, %d Running; e.g. %v", len(list.Items), running, notRunning)
		}
		pods = list
		return nil
	})
	return pods
}

// testPodsSpreadAndRun creates 30 pods with kubectl and checks that they reach Running
// on all three nodes.
func (s *stack) testPodsSpreadAndRun(t *testing.T) {
	if out, err := s.kubectl(s.ctx, spreadManifest(), "create", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pods := s.waitAllRunning(t, 4*time.Minute)
	perNode := map[string]int{}
	for _, p := range pods.Items {
		perNode[p.Spec.NodeName]++
	}
	t.Logf("pods per node: %v", perNode)
	if len(perNode) != initialKubelets {
		t.Errorf("pods landed on %d nodes, want all %d: %v", len(perNode), initialKubelets, perNode)
	}
	for node, n := range perNode {
		if n < spreadPods/initialKubelets/2 {
			t.Errorf("node %s runs %d pods: not spread (%v)", node, n, perNode)
		}
	}
}

// testEvents checks that the scheduler's, the kubelets' and csr-signer's events reach
// the apiserver. They travel only through NATS, which requires mutual TLS: each arrives
// because its component presented a certificate from the cluster CA (a kubelet its
// CSR-issued one) and the apiserver consumed it with apiserver-nats-client.
func (s *stack) testEvents(t *testing.T) {
	s.eventually(t, time.Minute, "Scheduled, Started and csr-signer events", func(ctx context.Context) error {
		list, err := s.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Name == "spread-0" || ev.Source.Component == "csr-signer" {
				seen[ev.Source.Component+"/"+ev.Reason] = true
			}
		}
		for _, want := range []string{"default-scheduler/Scheduled", "kubelet/Started"} {
			if !seen[want] {
				return fmt.Errorf("no %s event for spread-0 (seen %v)", want, keys(seen))
			}
		}
		for k := range seen {
			if strings.HasPrefix(k, "csr-signer/") {
				return nil
			}
		}
		return fmt.Errorf("no csr-signer event (seen %v)", keys(seen))
	})
}

// testExecAndLogs runs kubectl exec and kubectl logs on one of the pods.
func (s *stack) testExecAndLogs(t *testing.T) {
	out, err := s.kubectl(s.ctx, "", "exec", "spread-0", "--", "echo", "hello from exec")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "hello from exec" {
		t.Errorf("kubectl exec printed %q, want %q", out, "hello from exec")
	}
	s.eventually(t, 30*time.Second, "kubectl logs", func(ctx context.Context) error {
		out, err := s.kubectl(ctx, "", "logs", "spread-0")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "started spread-0") {
			return fmt.Errorf("logs %q lack %q", out, "started spread-0")
		}
		return nil
	})
}

// jaegerTrace is the part of Jaeger's /api/traces answer the test reads.
type jaegerTrace struct {
	TraceID   string `json:"traceID"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
	Spans []struct {
		OperationName string `json:"operationName"`
	} `json:"spans"`
}

// testPodTrace finds, through Jaeger's search API, the trace of one of the pods (the
// trace ID of its skiff.dev/traceparent annotation) and checks it holds spans from the
// apiserver, the scheduler and the kubelet.
func (s *stack) testPodTrace(t *testing.T) {
	pods, err := s.spreadPods(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	podOfTrace := map[string]string{} // trace ID -> pod name
	for _, p := range pods.Items {
		// traceparent: 00-<32 hex trace ID>-<16 hex span ID>-<flags>
		if parts := strings.Split(p.Annotations["skiff.dev/traceparent"], "-"); len(parts) == 4 {
			podOfTrace[parts[1]] = p.Name
		}
	}
	if len(podOfTrace) == 0 {
		t.Skip("pods carry no skiff.dev/traceparent annotation yet")
	}
	want := []string{"skiff-apiserver", "skiff-scheduler", "skiff-kubelet"}
	s.eventually(t, 2*time.Minute, "a pod's trace in Jaeger with apiserver, scheduler and kubelet spans", func(ctx context.Context) error {
		url := s.jaegerURL + "/api/traces?service=skiff-apiserver&lookback=1h&limit=2000"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		var body struct {
			Data []jaegerTrace `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return fmt.Errorf("GET %s: %w", url, err)
		}
		found := 0
		var last string
		for _, tr := range body.Data {
			pod, ok := podOfTrace[tr.TraceID]
			if !ok {
				continue
			}
			found++
			services := map[string]bool{}
			for _, p := range tr.Processes {
				services[p.ServiceName] = true
			}
			var missing []string
			for _, w := range want {
				if !services[w] {
					missing = append(missing, w)
				}
			}
			if len(missing) == 0 {
				t.Logf("trace %s of pod %s: %d spans from %v", tr.TraceID, pod, len(tr.Spans), keys(services))
				return nil
			}
			last = fmt.Sprintf("trace %s of pod %s lacks spans from %v (has %v)", tr.TraceID, pod, missing, keys(services))
		}
		return fmt.Errorf("%d traces from skiff-apiserver, %d of the pods; %s", len(body.Data), found, last)
	})
}

// testScale grows the cluster to five kubelets.
func (s *stack) testScale(t *testing.T) {
	s.composeRun(t, "up", "-d", "--no-build", "--no-recreate", "--scale", fmt.Sprintf("kubelet=%d", scaledKubelets))
	s.checkNodeCertificates(t, s.waitReadyNodes(t, scaledKubelets))
}

// testAPIServerRestart kills the apiserver, starts it again, and checks that every pod
// is still there, the same pod (UID), and Running.
func (s *stack) testAPIServerRestart(t *testing.T) {
	before, err := s.spreadPods(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, p := range before.Items {
		uids[p.Name] = string(p.UID)
	}
	s.composeRun(t, "kill", "apiserver")
	s.eventually(t, 20*time.Second, "apiserver gone after docker compose kill", func(ctx context.Context) error {
		if _, err := s.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
			return errors.New("the apiserver still answers")
		}
		return nil
	})
	s.composeRun(t, "start", "apiserver")
	s.eventually(t, 2*time.Minute, "apiserver ready after start", func(ctx context.Context) error {
		_, err := s.kubectl(ctx, "", "get", "--raw", "/readyz")
		return err
	})
	after := s.waitAllRunning(t, 2*time.Minute)
	for _, p := range after.Items {
		if uids[p.Name] != string(p.UID) {
			t.Errorf("pod %s: UID %s after the restart, %s before", p.Name, p.UID, uids[p.Name])
		}
	}
}

// testDown runs docker compose down -v and checks nothing of the project is left.
func (s *stack) testDown(t *testing.T) {
	s.down(t)
}

// down removes the project's containers, networks and volumes and fails t if any is
// left. It runs in t.Cleanup too; a second run finds nothing to do.
func (s *stack) down(t *testing.T) { t.Helper(); s.Down(t) }

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
