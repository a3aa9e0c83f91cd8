package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"skiff.dev/tests/internal/skifftest"
)

// transports are kubectl's two ways to stream exec: WebSocket
// (v5.channel.k8s.io, the default) and SPDY.
var transports = []struct {
	name string
	env  []string
}{
	{"websocket", nil},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
}

// kubectlCmd is the real kubectl against the cluster with extra environment.
func (c *cluster) kubectlCmd(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, kubectlPath(c.t), args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+c.cacheDir), env...)
	return cmd
}

// waitRunning waits until pod runs.
func (c *cluster) waitRunning(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	eventually(t, 60*time.Second, func() (bool, string) {
		pod, err := c.Client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pod.Status.Phase == corev1.PodRunning, fmt.Sprintf("phase %s", pod.Status.Phase)
	})
}

// TestExecLogsPortForward drives kubectl exec, logs and port-forward against
// the all-in-one with the process runtime: apiserver → exec-proxy → kubelet →
// the runtime's streaming server.
func TestExecLogsPortForward(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.mustKubectl(ctx, "run", "shell", "--image=busybox", "--command", "--", "sleep", "3600")
	c.waitRunning(ctx, t, "shell")

	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Run("exec echo hello", func(t *testing.T) {
				out, err := c.kubectlCmd(ctx, tr.env, "exec", "shell", "--", "echo", "hello").CombinedOutput()
				if err != nil || string(out) != "hello\n" {
					t.Errorf("got %q, %v, want hello", out, err)
				}
			})
			t.Run("the command's exit code is kubectl's", func(t *testing.T) {
				out, err := c.kubectlCmd(ctx, tr.env, "exec", "shell", "--", "sh", "-c", "exit 3").CombinedOutput()
				var exitErr *exec.ExitError
				if !errors.As(err, &exitErr) || exitErr.ExitCode() != 3 {
					t.Errorf("err = %v (%s), want exit code 3", err, out)
				}
			})
			t.Run("stdin with -i", func(t *testing.T) {
				cmd := c.kubectlCmd(ctx, tr.env, "exec", "-i", "shell", "--", "cat")
				cmd.Stdin = strings.NewReader("data\n")
				out, err := cmd.CombinedOutput()
				if err != nil || string(out) != "data\n" {
					t.Errorf("got %q, %v, want data", out, err)
				}
			})
			t.Run("-it under a pseudo-terminal", func(t *testing.T) {
				cmd := c.kubectlCmd(ctx, tr.env, "exec", "-it", "shell", "--", "sh")
				term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
				if err != nil {
					t.Fatal(err)
				}
				defer term.Close()
				out := &skifftest.SyncBuffer{}
				go func() { _, _ = io.Copy(out, term) }()
				// The shell sees a terminal of the size kubectl's has.
				fmt.Fprint(term, "stty size; echo $((6*7))\r")
				eventually(t, 20*time.Second, func() (bool, string) {
					return strings.Contains(out.String(), "30 100") && strings.Contains(out.String(), "42"), out.String()
				})
				fmt.Fprint(term, "exit\r")
				if err := cmd.Wait(); err != nil {
					t.Errorf("kubectl exec -it: %v\n%s", err, out)
				}
			})
		})
	}

	t.Run("a user without pods/exec is refused with 403", func(t *testing.T) {
		// skiff pki init wrote a kubeconfig per identity; the scheduler may read
		// pods but not exec into them.
		schedulerKubeconfig := filepath.Join(filepath.Dir(c.Kubeconfig), "pki", "scheduler.kubeconfig")
		out, err := c.kubectlCmd(ctx, nil, "--kubeconfig", schedulerKubeconfig, "exec", "shell", "--", "true").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "forbidden") || !strings.Contains(string(out), "pods/exec") {
			t.Errorf("got %v: %s, want a Forbidden error naming pods/exec", err, out)
		}
	})

	t.Run("closing kubectl ends the command on the node", func(t *testing.T) {
		for _, tr := range transports {
			cmd := c.kubectlCmd(ctx, tr.env, "exec", "shell", "--", "sh", "-c", "echo $$; exec sleep 3600")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			pid, perr := strconv.Atoi(strings.TrimSpace(line))
			if err != nil || perr != nil {
				t.Fatalf("%s: read pid: %q %v %v", tr.name, line, err, perr)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			eventually(t, 20*time.Second, func() (bool, string) {
				return syscall.Kill(pid, 0) != nil, fmt.Sprintf("%s: process %d still runs", tr.name, pid)
			})
		}
	})

	t.Run("logs", func(t *testing.T) {
		script := "echo one; echo two; echo three; while true; do sleep 0.3; echo tick; done"
		c.mustKubectl(ctx, "run", "talker", "--image=busybox", "--command", "--", "sh", "-c", script)
		c.waitRunning(ctx, t, "talker")
		eventually(t, 20*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "logs", "talker")
			return err == nil && strings.HasPrefix(out, "one\ntwo\nthree\n"), out
		})
		out := c.mustKubectl(ctx, "logs", "talker", "--tail=2")
		if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 2 {
			t.Errorf("--tail=2: %q", out)
		}

		// -f: lines written after kubectl started arrive while it follows.
		cmd := c.kubectlCmd(ctx, nil, "logs", "-f", "talker", "--tail=0")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(stdout)
		for i := 0; i < 3; i++ {
			line, err := rd.ReadString('\n')
			if err != nil || line != "tick\n" {
				t.Errorf("followed line %d: %q %v", i, line, err)
				break
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	t.Run("attach streams the container's output", func(t *testing.T) {
		for _, tr := range transports {
			cmd := c.kubectlCmd(ctx, tr.env, "attach", "talker")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "tick\n" {
				t.Errorf("%s: attached and read %q, %v, want tick", tr.name, line, err)
			}
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	t.Run("logs -c picks the container", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pair", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: "left", Image: "busybox", Command: []string{"sh", "-c", "echo from-left; sleep 3600"}},
				{Name: "right", Image: "busybox", Command: []string{"sh", "-c", "echo from-right; sleep 3600"}},
			}},
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitRunning(ctx, t, "pair")
		eventually(t, 20*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "logs", "pair", "-c", "right")
			return err == nil && out == "from-right\n", out
		})
	})

	t.Run("logs --previous after a restart", func(t *testing.T) {
		counter := filepath.Join(t.TempDir(), "runs")
		script := fmt.Sprintf("n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo run $n; sleep 1; exit 1", counter)
		c.mustKubectl(ctx, "run", "crasher", "--image=busybox", "--command", "--", "sh", "-c", script)
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "crasher", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := containerStatus(pod)
			return cs != nil && cs.RestartCount >= 1, fmt.Sprintf("%+v", cs)
		})
		// As kube chooses, --previous reads the last run that terminated: while the
		// container waits out CrashLoopBackOff, the run that crashed, which plain logs
		// shows too. (Garbage collection keeps only the last exited run, so the one
		// before it is gone by then; the running case is services/kubelet/server's
		// TestLogContainerIDFollowsKubesChoice.) Checked while the container's state is
		// the same around the two reads.
		state := func() string {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "crasher", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if cs := containerStatus(pod); cs != nil && cs.State.Waiting != nil {
				return "waiting " + cs.State.Waiting.Reason + " after " + cs.LastTerminationState.String()
			}
			return fmt.Sprintf("%+v", pod.Status.ContainerStatuses)
		}
		eventually(t, 90*time.Second, func() (bool, string) {
			before := state()
			cur, err1 := c.kubectl(ctx, "logs", "crasher")
			prev, err2 := c.kubectl(ctx, "logs", "crasher", "--previous")
			after := state()
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(cur, "run ")))
			return err1 == nil && err2 == nil && before == after && strings.HasPrefix(after, "waiting CrashLoopBackOff") && n >= 2 && prev == cur,
				fmt.Sprintf("state %q, current %q (%v), previous %q (%v)", after, cur, err1, prev, err2)
		})
	})

	t.Run("port-forward reaches a server the pod runs", func(t *testing.T) {
		server := filepath.Join(t.TempDir(), "webserver")
		if out, err := exec.Command("go", "build", "-o", server, "./testdata/webserver").CombinedOutput(); err != nil {
			t.Fatalf("build webserver: %v\n%s", err, out)
		}
		port := freePort(t)
		c.mustKubectl(ctx, "run", "web", "--image=webserver", "--command", "--", server, strconv.Itoa(port))
		c.waitRunning(ctx, t, "web")
		for _, tr := range transports {
			pfCtx, stop := context.WithCancel(ctx)
			cmd := c.kubectlCmd(pfCtx, tr.env, "port-forward", "pod/web", fmt.Sprintf(":%d", port))
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			m := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+)`).FindStringSubmatch(line)
			if m == nil {
				stop()
				_ = cmd.Wait()
				t.Fatalf("%s: kubectl port-forward printed %q", tr.name, line)
			}
			var body []byte
			eventually(t, 20*time.Second, func() (bool, string) {
				hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := hc.Get("http://127.0.0.1:" + m[1] + "/")
				if err != nil {
					return false, err.Error()
				}
				defer resp.Body.Close()
				body, _ = io.ReadAll(resp.Body)
				return bytes.Equal(body, []byte("hello from the pod")), string(body)
			})
			stop()
			_ = cmd.Wait()
		}
	})
}

// freePort is a TCP port on loopback that nothing listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
