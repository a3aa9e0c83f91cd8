package containerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// transports are kubectl's two ways to stream: WebSocket (the default) and
// SPDY.
var transports = []struct {
	name string
	env  []string
}{
	{"websocket", nil},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
}

// server is a pod script answering every TCP connection on 8080 with a line.
const server = "while true; do echo hello-from-$(hostname) | nc -l -p 8080; done"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestPodNetworking(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "net-server", server)
	runPod(ctx, t, "net-client", "sleep 3600", `--overrides={"spec":{"dnsPolicy":"Default"}}`)
	srv, cli := waitRunning(ctx, t, "net-server"), waitRunning(ctx, t, "net-client")

	t.Run("each pod has its own IP from the node's podCIDR", func(t *testing.T) {
		prefix := netip.MustParsePrefix(podCIDR)
		for _, ip := range []string{srv.Status.PodIP, cli.Status.PodIP} {
			if a, err := netip.ParseAddr(ip); err != nil || !prefix.Contains(a) {
				t.Errorf("pod IP %q is not in %s", ip, podCIDR)
			}
		}
		if srv.Status.PodIP == cli.Status.PodIP {
			t.Errorf("both pods have IP %s", srv.Status.PodIP)
		}
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := kubectl(ctx, "get", "node", "e2e-containerd", "-o", "jsonpath={.spec.podCIDR}")
			return err == nil && out == podCIDR, fmt.Sprintf("node IPAM gave the node %q (%v), want %s", out, err, podCIDR)
		})
	})
	t.Run("pods on the node reach each other over TCP", func(t *testing.T) {
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := kubectl(ctx, "exec", "net-client", "--", "nc", "-w", "3", srv.Status.PodIP, "8080")
			return err == nil && strings.TrimSpace(out) == "hello-from-net-server", fmt.Sprintf("%q %v", out, err)
		})
	})
	t.Run("resolv.conf follows dnsPolicy Default: the node's resolver", func(t *testing.T) {
		host, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			t.Skip("the node has no /etc/resolv.conf")
		}
		var want string
		for _, l := range strings.Split(string(host), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "nameserver" {
				want = "nameserver " + f[1]
				break
			}
		}
		out := mustKubectl(ctx, t, "exec", "net-client", "--", "cat", "/etc/resolv.conf")
		if want != "" && !strings.Contains(out, want) {
			t.Errorf("pod resolv.conf %q lacks the node's %q", out, want)
		}
	})
}

// TestDNSPolicyClusterFirst: a pod of the default dnsPolicy gets the kubelet's
// --cluster-dns and --cluster-domain in its resolv.conf, as kube's kubelet writes them.
func TestDNSPolicyClusterFirst(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "dns-cluster-first", "sleep 3600")
	waitRunning(ctx, t, "dns-cluster-first")
	out := mustKubectl(ctx, t, "exec", "dns-cluster-first", "--", "cat", "/etc/resolv.conf")
	var servers []string
	var search, options string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "nameserver":
			servers = append(servers, f[1])
		case len(f) >= 2 && f[0] == "search":
			search = strings.Join(f[1:], " ")
		case len(f) >= 2 && f[0] == "options":
			options = strings.Join(f[1:], " ")
		}
	}
	if len(servers) != 1 || servers[0] != clusterDNS {
		t.Errorf("nameservers %v, want only %s:\n%s", servers, clusterDNS, out)
	}
	if !strings.HasPrefix(search, "default.svc.cluster.local svc.cluster.local cluster.local") {
		t.Errorf("search %q, want default.svc.cluster.local svc.cluster.local cluster.local first:\n%s", search, out)
	}
	if options != "ndots:5" {
		t.Errorf("options %q, want ndots:5:\n%s", options, out)
	}
}

// TestEtcHostsIsKubeletManaged: a pod's /etc/hosts is the kubelet's, naming the pod at
// its IP, as kube's kubelet writes it.
func TestEtcHostsIsKubeletManaged(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "etc-hosts", "sleep 3600")
	pod := waitRunning(ctx, t, "etc-hosts")
	out := mustKubectl(ctx, t, "exec", "etc-hosts", "--", "cat", "/etc/hosts")
	if !strings.HasPrefix(out, "# Kubernetes-managed hosts file.\n") || !strings.Contains(out, pod.Status.PodIP+"\tetc-hosts\n") {
		t.Errorf("/etc/hosts = %q, want the kubelet's, with %s\tetc-hosts", out, pod.Status.PodIP)
	}
}

func TestDNSPolicyNone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"dns-none"},"spec":{
		"dnsPolicy":"None","dnsConfig":{"nameservers":["192.0.2.10"],"searches":["example.test"]},
		"containers":[{"name":"c","image":%q,"imagePullPolicy":"IfNotPresent","command":["sleep","3600"]}]}}`, busyboxImage)
	cmd := kubectlCmd(ctx, nil, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	waitRunning(ctx, t, "dns-none")
	out := mustKubectl(ctx, t, "exec", "dns-none", "--", "cat", "/etc/resolv.conf")
	if !strings.Contains(out, "nameserver 192.0.2.10") || !strings.Contains(out, "search example.test") {
		t.Errorf("resolv.conf = %q, want only the pod's dnsConfig", out)
	}
}

func TestStreams(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "shell", "sleep 3600")
	runPod(ctx, t, "talker", "while true; do echo tick; sleep 0.3; done")
	runPod(ctx, t, "pf-server", server)
	waitRunning(ctx, t, "shell")
	waitRunning(ctx, t, "talker")
	waitRunning(ctx, t, "pf-server")

	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Run("exec", func(t *testing.T) {
				out, err := kubectlCmd(ctx, tr.env, "exec", "shell", "--", "echo", "hello").CombinedOutput()
				if err != nil || string(out) != "hello\n" {
					t.Errorf("got %q, %v", out, err)
				}
				_, err = kubectlCmd(ctx, tr.env, "exec", "shell", "--", "sh", "-c", "exit 3").CombinedOutput()
				var exitErr *exec.ExitError
				if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
					t.Errorf("exit 3: err = %v, want exit code 3", err)
				}
				cmd := kubectlCmd(ctx, tr.env, "exec", "-i", "shell", "--", "cat")
				cmd.Stdin = strings.NewReader("data\n")
				if out, err := cmd.CombinedOutput(); err != nil || string(out) != "data\n" {
					t.Errorf("exec -i cat: %q, %v", out, err)
				}
			})
			t.Run("exec -it under a pseudo-terminal", func(t *testing.T) {
				cmd := kubectlCmd(ctx, tr.env, "exec", "-it", "shell", "--", "sh")
				term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
				if err != nil {
					t.Fatal(err)
				}
				defer term.Close()
				out := &syncBuffer{}
				go func() { _, _ = io.Copy(out, term) }()
				fmt.Fprint(term, "stty size; echo $((6*7))\r")
				eventually(t, 20*time.Second, func() (bool, string) {
					return strings.Contains(out.String(), "30 100") && strings.Contains(out.String(), "42"), out.String()
				})
				fmt.Fprint(term, "exit\r")
				if err := cmd.Wait(); err != nil {
					t.Errorf("kubectl exec -it: %v\n%s", err, out)
				}
			})
			t.Run("attach", func(t *testing.T) {
				cmd := kubectlCmd(ctx, tr.env, "attach", "talker")
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
				if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "tick\n" {
					t.Errorf("attached and read %q, %v, want tick", line, err)
				}
			})
			t.Run("port-forward", func(t *testing.T) {
				pfCtx, stop := context.WithCancel(ctx)
				defer stop()
				cmd := kubectlCmd(pfCtx, tr.env, "port-forward", "pod/pf-server", ":8080")
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { stop(); _ = cmd.Wait() }()
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`).FindStringSubmatch(line)
				if m == nil {
					t.Fatalf("kubectl port-forward printed %q", line)
				}
				eventually(t, 20*time.Second, func() (bool, string) {
					conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 3*time.Second)
					if err != nil {
						return false, err.Error()
					}
					defer conn.Close()
					_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
					got, err := bufio.NewReader(conn).ReadString('\n')
					return got == "hello-from-pf-server\n", fmt.Sprintf("%q %v", got, err)
				})
			})
		})
	}
	t.Run("logs -f follows new lines", func(t *testing.T) {
		cmd := kubectlCmd(ctx, nil, "logs", "-f", "talker", "--tail=0")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		rd := bufio.NewReader(stdout)
		for i := 0; i < 3; i++ {
			if line, err := rd.ReadString('\n'); err != nil || line != "tick\n" {
				t.Fatalf("followed line %d: %q %v", i, line, err)
			}
		}
	})
	t.Run("cp into and out of the container", func(t *testing.T) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(src, []byte("copied\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		mustKubectl(ctx, t, "cp", src, "shell:/tmp/in.txt")
		if out := mustKubectl(ctx, t, "exec", "shell", "--", "cat", "/tmp/in.txt"); out != "copied\n" {
			t.Errorf("in the container: %q", out)
		}
		back := filepath.Join(dir, "back.txt")
		mustKubectl(ctx, t, "cp", "shell:/tmp/in.txt", back)
		if data, err := os.ReadFile(back); err != nil || string(data) != "copied\n" {
			t.Errorf("copied back: %q, %v", data, err)
		}
	})
}

func TestCrashLoopBackOff(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "crasher", "echo crashing; exit 1")
	pod := waitReason(ctx, t, "crasher", "CrashLoopBackOff")
	if cs := pod.Status.ContainerStatuses[0]; cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 1 {
		t.Errorf("last termination %+v, want exit code 1", cs.LastTerminationState)
	}
}

func TestMissingImage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	// No registry can be reached: the pull fails, then backs off.
	mustKubectl(ctx, t, "run", "missing", "--image=skiff.test/missing:1", "--command", "--", "true")
	pod := waitReason(ctx, t, "missing", "ErrImagePull")
	if msg := pod.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "skiff.test/missing:1") {
		t.Errorf("ErrImagePull message %q does not name the image", msg)
	}
	waitReason(ctx, t, "missing", "ImagePullBackOff")
}

func TestMemoryLimitOOMKilled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hog"},"spec":{"restartPolicy":"Never",
		"containers":[{"name":"c","image":%q,"imagePullPolicy":"IfNotPresent","command":["tail","/dev/zero"],
		"resources":{"limits":{"memory":"24Mi"}}}]}}`, busyboxImage)
	cmd := kubectlCmd(ctx, nil, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	pod := waitReason(ctx, t, "hog", "OOMKilled")
	if code := pod.Status.ContainerStatuses[0].State.Terminated.ExitCode; code != 137 {
		t.Errorf("exit code %d, want 137", code)
	}
}

func TestDeleteRemovesContainersAndSandbox(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	runPod(ctx, t, "doomed", "sleep 3600")
	pod := waitRunning(ctx, t, "doomed")
	byUID := map[string]string{"io.kubernetes.pod.uid": string(pod.UID)}
	count := func() (int, int, error) {
		s, err := skiff.cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: byUID}})
		if err != nil {
			return 0, 0, err
		}
		c, err := skiff.cri.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: byUID}})
		if err != nil {
			return 0, 0, err
		}
		return len(s.GetItems()), len(c.GetContainers()), nil
	}
	if s, c, err := count(); err != nil || s != 1 || c != 1 {
		t.Fatalf("before delete: %d sandboxes, %d containers, %v; want 1 and 1", s, c, err)
	}
	if err := skiff.client.CoreV1().Pods("default").Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, func() (bool, string) {
		s, c, err := count()
		return err == nil && s == 0 && c == 0, fmt.Sprintf("%d sandboxes, %d containers, %v", s, c, err)
	})
}

func TestHostPort(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"host-port"},"spec":{
		"containers":[{"name":"c","image":%q,"imagePullPolicy":"IfNotPresent","command":["sh","-c",%q],
		"ports":[{"containerPort":8080,"hostPort":%d}]}]}}`, busyboxImage, server, hostPort)
	cmd := kubectlCmd(ctx, nil, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	waitRunning(ctx, t, "host-port")
	// The node's port reaches the pod (portmap's DNAT, loopback included).
	eventually(t, 30*time.Second, func() (bool, string) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hostPort), 3*time.Second)
		if err != nil {
			return false, err.Error()
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		got, err := bufio.NewReader(conn).ReadString('\n')
		return got == "hello-from-host-port\n", fmt.Sprintf("%q %v", got, err)
	})
}
