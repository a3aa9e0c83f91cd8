package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// describedEvents returns the REASON column of the Events section of kubectl describe's
// output, in the order kubectl prints them.
func describedEvents(out string) []string {
	_, section, ok := strings.Cut(out, "\nEvents:")
	if !ok {
		return nil
	}
	var reasons []string
	for _, line := range strings.Split(section, "\n") {
		fields := strings.Fields(line)
		// "  Normal  Scheduled  5s  default-scheduler  Successfully assigned ..."
		if len(fields) >= 2 && (fields[0] == "Normal" || fields[0] == "Warning") {
			reasons = append(reasons, fields[1])
		}
	}
	return reasons
}

// TestEventsWithKubectl checks the Events a Kubernetes user expects through the real
// kubectl: describe lists a running pod's life in order and says why a pod cannot be
// scheduled, and get events filters by field selector. Events travel from the scheduler
// and the kubelet over the all-in-one's embedded NATS to the apiserver.
func TestEventsWithKubectl(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// A pod created before the node registers would first (rightly) fail to schedule.
	eventually(t, 60*time.Second, func() (bool, string) {
		out, err := c.kubectl(ctx, "get", "nodes")
		return err == nil && strings.Contains(out, " Ready "), out
	})
	c.mustKubectl(ctx, "run", "web", "--image=busybox:events")
	c.mustKubectl(ctx, "run", "huge", "--image=busybox:events", "--overrides",
		`{"spec":{"containers":[{"name":"huge","image":"busybox:events","resources":{"requests":{"cpu":"1000"}}}]}}`)

	t.Run("describe pod lists Scheduled, Pulling, Pulled, Created, Started in order", func(t *testing.T) {
		want := "Scheduled Pulling Pulled Created Started"
		eventually(t, 90*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "describe", "pod", "web")
			if err != nil {
				return false, out
			}
			return strings.Join(describedEvents(out), " ") == want, out
		})
		out := c.mustKubectl(ctx, "describe", "pod", "web")
		for _, line := range []string{
			`Successfully assigned default/web to e2e-sim`,
			`Pulling image "busybox:events"`,
			`Created container: web`,
			`Started container web`,
		} {
			if !strings.Contains(out, line) {
				t.Errorf("describe pod web lacks %q:\n%s", line, out)
			}
		}
		if !regexp.MustCompile(`Normal\s+Scheduled\s+\S+\s+default-scheduler\s`).MatchString(out) ||
			!regexp.MustCompile(`Normal\s+Started\s+\S+\s+kubelet\s`).MatchString(out) {
			t.Errorf("events do not name their sources (From):\n%s", out)
		}
	})

	t.Run("an unschedulable pod shows FailedScheduling with why", func(t *testing.T) {
		eventually(t, 60*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "describe", "pod", "huge")
			return err == nil && regexp.MustCompile(`Warning\s+FailedScheduling\s+.*0/1 nodes are available: 1 Insufficient cpu\.`).MatchString(out), out
		})
	})

	t.Run("get events --field-selector involvedObject.name filters", func(t *testing.T) {
		out := c.mustKubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=huge")
		if !strings.Contains(out, "pod/huge") || strings.Contains(out, "pod/web") {
			t.Errorf("kubectl get events --field-selector involvedObject.name=huge:\n%s", out)
		}
		if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); strings.Join(header, " ") != "LAST SEEN TYPE REASON OBJECT MESSAGE" {
			t.Errorf("header %q", header)
		}
		out = c.mustKubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=web,reason=Started")
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "Started") {
			t.Errorf("kubectl get events --field-selector involvedObject.name=web,reason=Started:\n%s", out)
		}
		out = c.mustKubectl(ctx, "get", "events", "--field-selector", "type=Warning", "-o", "name")
		for _, name := range strings.Fields(out) {
			if !strings.HasPrefix(name, "event/huge.") {
				t.Errorf("type=Warning returned %s", name)
			}
		}
	})

	t.Run("get events -w streams a new pod's events as they happen", func(t *testing.T) {
		wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
		defer wcancel()
		watch := exec.CommandContext(wctx, kubectlPath(t), "get", "events", "-w", "--field-selector", "involvedObject.name=later")
		watch.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+c.cacheDir)
		stdout, err := watch.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := watch.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { wcancel(); _ = watch.Wait() }()
		lines := make(chan string)
		go func() {
			defer close(lines)
			scanner := bufio.NewScanner(stdout)
			for scanner.Scan() {
				lines <- scanner.Text()
			}
		}()
		time.Sleep(time.Second) // let the watch start before the pod exists
		c.mustKubectl(ctx, "run", "later", "--image=busybox:events")
		var seen []string
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl get events -w ended; saw:\n%s", strings.Join(seen, "\n"))
				}
				seen = append(seen, line)
				if strings.Contains(line, "Started") && strings.Contains(line, "pod/later") {
					return
				}
			case <-wctx.Done():
				t.Fatalf("no Started event for pod/later within 90s; saw:\n%s", strings.Join(seen, "\n"))
			}
		}
	})

	t.Run("the node's events are there too", func(t *testing.T) {
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "events", "--field-selector", "involvedObject.kind=Node")
			return err == nil && strings.Contains(out, "RegisteredNode") && strings.Contains(out, "NodeReady"), fmt.Sprint(out, err)
		})
	})
}
