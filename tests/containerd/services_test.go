package containerd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// proxyTable is the proxy's nftables table: the all-in-one's default, which the
// suite's skiff keeps.
const proxyTable = "skiff-proxy"

// webManifest is a Deployment of 3 busybox httpd replicas, each answering with its
// own host name (the pod's name) and ready while /tmp/ready exists, behind a
// NodePort Service web (port 80 → 8080).
const webManifest = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: httpd
        image: ` + busyboxImage + `
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "hostname > /www/index.html && touch /tmp/ready && exec httpd -f -p 8080 -h /www"]
        ports:
        - containerPort: 8080
        readinessProbe:
          exec:
            command: ["cat", "/tmp/ready"]
          periodSeconds: 1
          failureThreshold: 1
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: NodePort
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
`

// TestServices runs a Service over real containers: kube-proxy's nftables rules
// (the all-in-one's proxy) balance the ClusterIP over the Deployment's ready
// replicas, a replica failing its readiness probe leaves the EndpointSlice and the
// rotation, the NodePort answers on the node's address, and CoreDNS resolves the
// Service's name for a ClusterFirst pod.
func TestServices(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft is not installed (apt-get install nftables): skiff runs without its proxy")
	}
	ctx := testCtx(t)
	apply := kubectlCmd(ctx, nil, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(webManifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		_, _ = kubectl(context.Background(), "delete", "deployment/web", "service/web", "pod/svc-client", "--wait=false")
	})
	runPod(ctx, t, "svc-client", "sleep 3600")
	waitRunning(ctx, t, "svc-client")

	// The three replicas, ready, all in web's EndpointSlices.
	var backends map[string]string // pod IP → pod name
	eventually(t, 120*time.Second, func() (bool, string) {
		pods, err := skiff.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err.Error()
		}
		backends = map[string]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(&p) {
				backends[p.Status.PodIP] = p.Name
			}
		}
		ready := readyEndpoints(ctx, "web")
		return len(backends) == 3 && len(ready) == 3, fmt.Sprintf("ready pods %v, ready endpoints %v", backends, ready)
	})
	svc, err := skiff.client.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := svc.Spec.ClusterIP
	names := map[string]bool{}
	for _, n := range backends {
		names[n] = true
	}
	// The proxy syncs at most once a second (kube's --min-sync-period): wait until its
	// rules hold web's 3 endpoints.
	waitProxyEndpoints(t, "default/web", backends)

	t.Run("60 requests to the ClusterIP reach all 3 replicas", func(t *testing.T) {
		hits := requests(ctx, t, clusterIP, 60)
		for name := range names {
			if hits[name] == 0 {
				t.Errorf("replica %s got none of 60 requests: %v", name, hits)
			}
		}
		for name := range hits {
			if !names[name] {
				t.Errorf("answer %q is no replica of web (%v)", name, names)
			}
		}
	})

	t.Run("a replica reaches its own Service, itself included (hairpin)", func(t *testing.T) {
		var self string
		for _, n := range backends {
			self = n
			break
		}
		hits := requestsFrom(ctx, t, self, clusterIP, 60)
		if hits[self] == 0 {
			t.Errorf("%s never reached itself through the ClusterIP in 60 requests: %v", self, hits)
		}
		for name := range names {
			if hits[name] == 0 {
				t.Errorf("replica %s got none of 60 requests from %s: %v", name, self, hits)
			}
		}
	})

	t.Run("the Service name resolves through CoreDNS", func(t *testing.T) {
		if skiff.coredns == "" {
			t.Skip("bin/coredns is not built (make coredns): no cluster DNS runs")
		}
		const name = "web.default.svc.cluster.local"
		out, err := kubectl(ctx, "exec", "svc-client", "--", "nslookup", name)
		if err != nil || !strings.Contains(out, clusterIP) {
			t.Fatalf("nslookup %s from a ClusterFirst pod: %v\n%s\nwant address %s", name, err, out, clusterIP)
		}
		hits := requests(ctx, t, "web", 3) // the search path: default.svc.cluster.local
		for name := range hits {
			if !names[name] {
				t.Errorf("http://web/ answered %q, no replica of web (%v)", name, names)
			}
		}
	})

	t.Run("the NodePort answers on the node's address", func(t *testing.T) {
		nodePort := svc.Spec.Ports[0].NodePort
		if nodePort == 0 {
			t.Fatal("web has no nodePort")
		}
		addr := net.JoinHostPort(nodeAddress(ctx, t), fmt.Sprint(nodePort))
		client := &http.Client{Timeout: 3 * time.Second}
		seen := map[string]bool{}
		for i := 0; i < 30; i++ {
			resp, err := client.Get("http://" + addr + "/")
			if err != nil {
				out, _ := exec.Command("nft", "list", "table", "ip", proxyTable).CombinedOutput()
				t.Fatalf("GET http://%s/ from the host: %v\nnft list table ip %s:\n%s", addr, err, proxyTable, out)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			name := strings.TrimSpace(string(body))
			if !names[name] {
				t.Fatalf("NodePort %s answered %q (%s), no replica of web (%v)", addr, name, resp.Status, names)
			}
			seen[name] = true
		}
		if len(seen) < 2 {
			t.Errorf("30 requests to the NodePort all reached %v", seen)
		}
	})

	t.Run("an unready replica leaves the EndpointSlice and the rotation", func(t *testing.T) {
		var victimIP, victim string
		for ip, n := range backends {
			victimIP, victim = ip, n
			break
		}
		mustKubectl(ctx, t, "exec", victim, "--", "rm", "/tmp/ready")
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := getPod(ctx, victim)
			if err != nil {
				return false, err.Error()
			}
			ready := readyEndpoints(ctx, "web")
			return !podReady(pod) && len(ready) == 2 && !ready[victimIP], fmt.Sprintf("pod ready %v, ready endpoints %v", podReady(pod), ready)
		})
		// The proxy follows the EndpointSlice.
		rest := map[string]string{}
		for ip, n := range backends {
			if ip != victimIP {
				rest[ip] = n
			}
		}
		waitProxyEndpoints(t, "default/web", rest)
		hits := requests(ctx, t, clusterIP, 60)
		if hits[victim] != 0 {
			t.Errorf("unready %s still got %d of 60 requests: %v", victim, hits[victim], hits)
		}
		for name := range names {
			if name != victim && hits[name] == 0 {
				t.Errorf("ready replica %s got none of 60 requests: %v", name, hits)
			}
		}
	})
}

// endpointChain matches the name of one of the proxy's per-endpoint chains (kube's
// "endpoint-HASH-namespace/name/protocol/port__ip/port"): namespace/name, endpoint IP.
var endpointChain = regexp.MustCompile(`chain endpoint-[A-Z0-9]+-([^/]+/[^/]+)/[^/]+/[^_]*__([0-9.]+)/`)

// waitProxyEndpoints waits until the proxy's nftables table (ip proxyTable) forwards the Service namespace/name to exactly the given
// endpoint IPs.
func waitProxyEndpoints(t *testing.T, service string, want map[string]string) {
	t.Helper()
	eventually(t, 30*time.Second, func() (bool, string) {
		out, err := exec.Command("nft", "list", "table", "ip", proxyTable).CombinedOutput()
		if err != nil {
			return false, fmt.Sprintf("nft list table ip %s: %v: %s", proxyTable, err, out)
		}
		got := map[string]bool{}
		for _, m := range endpointChain.FindAllStringSubmatch(string(out), -1) {
			if m[1] == service {
				got[m[2]] = true
			}
		}
		ok := len(got) == len(want)
		for ip := range want {
			ok = ok && got[ip]
		}
		return ok, fmt.Sprintf("the proxy forwards %s to %v, want %v", service, got, want)
	})
}

// requests sends n HTTP GETs to host:80 from the svc-client pod (busybox nc, one
// kubectl exec) and counts the answers: replicas' host names. (busybox wget, static
// glibc, crashes in the image's empty NSS, so the request is written by hand.)
func requests(ctx context.Context, t *testing.T, host string, n int) map[string]int {
	t.Helper()
	return requestsFrom(ctx, t, "svc-client", host, n)
}

// request is a shell command sending one HTTP GET to host:80 and printing the body's
// last line, or FAILED.
func request(host string) string {
	return fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 3 %s 80 | tail -n 1 | grep . || echo FAILED`, host)
}

// requestsFrom is requests from the given pod.
func requestsFrom(ctx context.Context, t *testing.T, pod, host string, n int) map[string]int {
	t.Helper()
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do %s; i=$((i+1)); done`, n, request(host))
	out, err := kubectl(ctx, "exec", pod, "--", "sh", "-c", script)
	if err != nil {
		t.Fatalf("requests to %s from %s: %v\n%s", host, pod, err, out)
	}
	hits := map[string]int{}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case klogLine.MatchString(l):
			// kubectl's own log on its stderr, which kubectl() joins to the output:
			// at times "Unknown stream id 1, discarding message" after the command
			// ended. Not an answer; kept in the test's log.
			t.Logf("kubectl: %s", l)
		case strings.TrimSpace(l) != "":
			lines = append(lines, strings.TrimSpace(l))
			hits[strings.TrimSpace(l)]++
		}
	}
	if hits["FAILED"] > 0 || len(lines) != n {
		t.Fatalf("%d requests to %s from %s: %d answers, %d failed: %v\n%s", n, host, pod, len(lines), hits["FAILED"], hits, out)
	}
	return hits
}

// klogLine is a line kubectl logs through klog: severity, date, time, pid, file:line].
var klogLine = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ [^ ]+:\d+\] `)

// podReady is the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyEndpoints are the addresses of the Service's EndpointSlices whose ready
// condition holds (kube's: nil counts as ready).
func readyEndpoints(ctx context.Context, service string) map[string]bool {
	slices, err := skiff.client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	ready := map[string]bool{}
	if err != nil {
		return ready
	}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				for _, a := range ep.Addresses {
					ready[a] = true
				}
			}
		}
	}
	return ready
}

// nodeAddress is an address of the node NodePorts answer on: its InternalIP, or
// when that is loopback (skiff's default --bind-address 127.0.0.1; kube's proxy
// does not serve NodePorts on localhost either) the first IPv4 address of the
// host's first interface up, the pod bridge aside.
func nodeAddress(ctx context.Context, t *testing.T) string {
	t.Helper()
	node, err := skiff.client.CoreV1().Nodes().Get(ctx, "e2e-containerd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if ip := net.ParseIP(a.Address); a.Type == corev1.NodeInternalIP && ip != nil && !ip.IsLoopback() {
			return a.Address
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || ifc.Name == "skiff0" {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	t.Fatal("the host has no non-loopback IPv4 address")
	return ""
}
