package allinone

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"skiff.dev/services/internal/pki"
	"skiff.dev/services/kubelet/nodestatus"
)

// Cluster DNS: the all-in-one runs an unmodified CoreDNS (bin/coredns, `make coredns`)
// as a child process with its kubernetes plugin, and publishes it the way kubeadm does,
// as the kube-dns Service in kube-system.
const (
	// KubeDNSServiceIP is the kube-dns Service's ClusterIP, the tenth address of the
	// default --service-cluster-ip-range 10.96.0.0/12 (kubeadm's choice), and the
	// kubelet's --cluster-dns when the all-in-one runs CoreDNS.
	KubeDNSServiceIP = "10.96.0.10"
	// KubeDNSServiceName is the Service's name in kube-system (kubeadm keeps the name
	// kube-dns for CoreDNS too).
	KubeDNSServiceName = "kube-dns"
	// ClusterDomain is the cluster's DNS domain (the kubelet's --cluster-domain).
	ClusterDomain = "cluster.local"
	// DefaultCoreDNSPort is the port CoreDNS listens on (UDP and TCP) on the node's
	// address: unprivileged, so the all-in-one runs without root, and clear of a host
	// resolver on 53. The kube-dns Service maps port 53 to it.
	DefaultCoreDNSPort = 1053
	// corednsManagedBy marks the kube-dns EndpointSlice the all-in-one writes (the
	// Service has no selector, so no controller writes it).
	corednsManagedBy = "allinone.skiff.dev"
)

// FindCoreDNS returns the coredns binary beside the running executable (bin/coredns
// next to bin/skiff, as `make coredns` builds it), or "" when there is none.
func FindCoreDNS() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	path := filepath.Join(filepath.Dir(exe), "coredns")
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return path
	}
	return ""
}

// corednsChild is a configured, not yet started CoreDNS.
type corednsChild struct {
	binary, corefile string
	// addr is where it serves DNS (UDP and TCP), ready its readiness URL.
	addr  string
	ready string
}

// prepareCoreDNS writes <dataDir>/coredns/Corefile and coredns.kubeconfig (CoreDNS's
// identity, pki.CoreDNS, toward apiURL). CoreDNS listens at port (0 picks a free one)
// on hosts (every address when hosts is empty) and answers for cluster.local and the
// reverse zones from the apiserver; other names go to the node's resolvers. Only
// clients in allow get an answer (the acl plugin), so the node's address does not
// serve the whole network.
func prepareCoreDNS(binary, dataDir, pkiDir, apiURL string, hosts []string, port int, allow []string) (*corednsChild, error) {
	dir := filepath.Join(dataDir, "coredns")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "coredns.kubeconfig")
	if err := writeIdentityKubeconfig(kubeconfig, apiURL, pkiDir, pki.CoreDNS); err != nil {
		return nil, err
	}
	probe := "127.0.0.1"
	if len(hosts) > 0 {
		probe = hosts[0]
	}
	if port == 0 {
		p, err := freeDNSPort(probe)
		if err != nil {
			return nil, err
		}
		port = p
	}
	readyPort, err := freeTCPPort(probe)
	if err != nil {
		return nil, err
	}
	corefile := filepath.Join(dir, "Corefile")
	ready := net.JoinHostPort(probe, strconv.Itoa(readyPort))
	if err := pki.WriteFileAtomic(corefile, []byte(renderCorefile(hosts, port, ready, kubeconfig, allow)), 0o600); err != nil {
		return nil, err
	}
	return &corednsChild{binary: binary, corefile: corefile,
		addr:  net.JoinHostPort(probe, strconv.Itoa(port)),
		ready: "http://" + ready + "/ready"}, nil
}

// renderCorefile is kubeadm's default Corefile for the all-in-one: the kubernetes
// plugin for cluster.local and the reverse zones (reading the API as coredns.kubeconfig
// says), everything else forwarded to the node's resolvers, a 30 s cache. Left out:
// health and prometheus (fixed ports several all-in-ones would share) and loop (its
// probe query goes to the upstream resolvers at start). Added: bind (hosts) and acl
// (allow, then block the rest).
func renderCorefile(hosts []string, port int, ready, kubeconfig string, allow []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, ".:%d {\n", port)
	if len(hosts) > 0 {
		fmt.Fprintf(&b, "    bind %s\n", strings.Join(hosts, " "))
	}
	if len(allow) > 0 {
		fmt.Fprintf(&b, "    acl {\n        allow net %s\n        block\n    }\n", strings.Join(allow, " "))
	}
	fmt.Fprintf(&b, "    errors\n")
	fmt.Fprintf(&b, "    ready %s\n", ready)
	fmt.Fprintf(&b, "    kubernetes %s in-addr.arpa ip6.arpa {\n", ClusterDomain)
	fmt.Fprintf(&b, "        kubeconfig %s\n", kubeconfig)
	fmt.Fprintf(&b, "        pods insecure\n")
	fmt.Fprintf(&b, "        fallthrough in-addr.arpa ip6.arpa\n")
	fmt.Fprintf(&b, "        ttl 30\n")
	fmt.Fprintf(&b, "    }\n")
	if hasNameserver("/etc/resolv.conf") {
		fmt.Fprintf(&b, "    forward . /etc/resolv.conf\n")
	}
	fmt.Fprintf(&b, "    cache 30\n")
	fmt.Fprintf(&b, "    loadbalance\n")
	fmt.Fprintf(&b, "}\n")
	return b.String()
}

// hasNameserver reports whether the resolv.conf at path names a server (CoreDNS's
// forward refuses to start without one).
func hasNameserver(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "nameserver" {
			return true
		}
	}
	return false
}

// run runs CoreDNS until ctx ends (SIGTERM, then SIGKILL after 5 s); its output goes to
// the all-in-one's stderr. An exit before ctx ends is an error.
func (c *corednsChild) run(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, c.binary, "-conf", c.corefile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// A skiff killed outright takes its CoreDNS with it (Linux's parent-death signal).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.binary, err)
	}
	slog.Info("coredns started", "binary", c.binary, "pid", cmd.Process.Pid, "listen", c.addr, "corefile", c.corefile)
	err := cmd.Wait()
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("exited")
	}
	return fmt.Errorf("coredns: %w", err)
}

// waitReady polls CoreDNS's ready plugin until it answers 200 (the kubernetes plugin
// has synced with the apiserver), ctx ends or exited is closed.
func (c *corednsChild) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.ready, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				// ready answers once the plugins are; the DNS listener must be too.
				if conn, err := net.DialTimeout("tcp", c.addr, time.Second); err == nil {
					conn.Close()
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coredns not ready at %s: %w", c.ready, ctx.Err())
		case <-exited:
			return errors.New("coredns exited before it was ready")
		case <-tick.C:
		}
	}
}

// EnsureKubeDNS creates or updates kube-system/kube-dns (ClusterIP KubeDNSServiceIP,
// ports dns 53/UDP and dns-tcp 53/TCP to targetPort), with no selector, and its
// Endpoints and EndpointSlice naming nodeIP:targetPort, as kubeadm's kube-dns Service
// would list the CoreDNS pods. It returns the Service's ClusterIP.
func EnsureKubeDNS(ctx context.Context, client kubernetes.Interface, nodeIP string, targetPort int) (string, error) {
	labels := map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(int32(targetPort))},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(int32(targetPort))},
	}
	services := client.CoreV1().Services(metav1.NamespaceSystem)
	svc, err := services.Get(ctx, KubeDNSServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		svc, err = services.Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: KubeDNSServiceName, Labels: labels},
			Spec:       corev1.ServiceSpec{ClusterIP: KubeDNSServiceIP, Ports: ports},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", fmt.Errorf("create Service kube-system/%s: %w", KubeDNSServiceName, err)
		}
	case err != nil:
		return "", err
	default:
		svc.Spec.Ports, svc.Spec.Selector = ports, nil
		if svc, err = services.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			return "", fmt.Errorf("update Service kube-system/%s: %w", KubeDNSServiceName, err)
		}
	}

	epPorts := []corev1.EndpointPort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: int32(targetPort)},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: int32(targetPort)},
	}
	ep := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: KubeDNSServiceName, Labels: labels},
		Subsets:    []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: nodeIP}}, Ports: epPorts}},
	}
	if err := createOrUpdate(ctx, client.CoreV1().Endpoints(metav1.NamespaceSystem), ep); err != nil {
		return "", fmt.Errorf("Endpoints kube-system/%s: %w", KubeDNSServiceName, err)
	}
	addressType := discoveryv1.AddressTypeIPv4
	if ip, err := netip.ParseAddr(nodeIP); err == nil && ip.Is6() {
		addressType = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: KubeDNSServiceName, Labels: map[string]string{
			discoveryv1.LabelServiceName: KubeDNSServiceName, discoveryv1.LabelManagedBy: corednsManagedBy}},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{nodeIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}}},
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(int32(targetPort))},
			{Name: ptr.To("dns-tcp"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(targetPort))},
		},
	}
	if err := createOrUpdate(ctx, client.DiscoveryV1().EndpointSlices(metav1.NamespaceSystem), slice); err != nil {
		return "", fmt.Errorf("EndpointSlice kube-system/%s: %w", KubeDNSServiceName, err)
	}
	return svc.Spec.ClusterIP, nil
}

// objectClient is what createOrUpdate needs of a typed client.
type objectClient[T interface {
	*E
	metav1.Object
}, E any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// createOrUpdate creates want, or replaces the stored object's content with it.
func createOrUpdate[T interface {
	*E
	metav1.Object
}, E any](ctx context.Context, c objectClient[T, E], want T) error {
	got, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	want.SetResourceVersion(got.GetResourceVersion())
	_, err = c.Update(ctx, want, metav1.UpdateOptions{})
	return err
}

// writeIdentityKubeconfig writes a kubeconfig for apiURL as one of pki's identities,
// its certificate and key embedded.
func writeIdentityKubeconfig(path, apiURL, pkiDir string, id pki.Identity) error {
	ca, err := os.ReadFile(filepath.Join(pkiDir, pki.CACertFile))
	if err != nil {
		return err
	}
	certFile, keyFile := pki.KeyPairFiles(pkiDir, id.Name)
	cert, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	data, err := pki.Kubeconfig(apiURL, ca, id.CommonName, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(path, data, 0o600)
}

// freeTCPPort returns a TCP port free on host at the time of asking.
func freeTCPPort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeDNSPort returns a port free on host for both TCP and UDP.
func freeDNSPort(host string) (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errors.New("no port free for both TCP and UDP")
}

// startCoreDNS, when cfg.CoreDNS names a binary, publishes kube-dns, runs CoreDNS under
// run and waits until it is ready. CoreDNS listens on the node's address (the host's
// first non-loopback address when the node's is loopback: an Endpoints address may not
// be loopback, as in kube) and, with a loopback --bind-address, on it too. It returns
// the kubelet's cluster DNS servers and the address CoreDNS answers on ("" without
// CoreDNS).
func startCoreDNS(ctx context.Context, cfg Config, run func(string, func(context.Context) error), dataDir, pkiDir, apiURL, nodeIP string, admin *rest.Config) (clusterDNS []string, addr string, err error) {
	clusterDNS = cfg.ClusterDNS
	if cfg.CoreDNS == "" {
		return clusterDNS, "", nil
	}
	endpoint := nodeIP
	var hosts []string
	if ip, err := netip.ParseAddr(cfg.BindAddress); err == nil && ip.IsLoopback() {
		hosts = append(hosts, cfg.BindAddress)
	}
	if ip, err := netip.ParseAddr(endpoint); err != nil || ip.IsLoopback() {
		endpoint = nodestatus.DefaultNodeIP()
	}
	if ip, err := netip.ParseAddr(endpoint); err != nil || ip.IsLoopback() {
		return nil, "", fmt.Errorf("coredns: the host has no non-loopback address for the kube-dns endpoints")
	}
	if ip, err := netip.ParseAddr(cfg.BindAddress); err == nil && !ip.IsUnspecified() {
		hosts = append(hosts, endpoint)
	} else {
		hosts = nil // every address
	}
	allow := []string{"127.0.0.0/8", endpoint + "/32", cfg.PodCIDR}
	for _, n := range cfg.ControllerManager.ClusterCIDRs {
		allow = append(allow, n.String())
	}
	child, err := prepareCoreDNS(cfg.CoreDNS, dataDir, pkiDir, apiURL, hosts, cfg.CoreDNSPort, allow)
	if err != nil {
		return nil, "", fmt.Errorf("coredns: %w", err)
	}
	_, port, _ := net.SplitHostPort(child.addr)
	targetPort, _ := strconv.Atoi(port)
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, "", err
	}
	serviceIP, err := EnsureKubeDNS(ctx, client, endpoint, targetPort)
	if err != nil {
		return nil, "", fmt.Errorf("coredns: %w", err)
	}
	exited := make(chan struct{})
	run("coredns", func(ctx context.Context) error {
		defer close(exited)
		return child.run(ctx)
	})
	if err := child.waitReady(ctx, exited); err != nil {
		return nil, "", err
	}
	if clusterDNS == nil {
		clusterDNS = []string{serviceIP}
	}
	return clusterDNS, child.addr, nil
}
