package compose

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/tests/security/attack"
)

// testAttacksFromANode is tests/security's matrix on the full stack, from inside one
// node's container (cmd/attacker copied there), with what that node holds: its
// CSR-issued client certificate, the copy of it a pod of the process runtime makes, the
// bootstrap token of its bootstrap volume and a pod's ServiceAccount token. Every door
// it can reach on the compose network (etcd, NATS, exec-proxy, another node's kubelet,
// the API) must refuse each escalation; and an event it publishes on its own subject
// naming another node is dropped and counted by the apiserver.
func (s *stack) testAttacksFromANode(t *testing.T) {
	ctx := s.ctx
	containers := s.Containers(t, "kubelet")
	if len(containers) < 2 {
		t.Fatalf("%d kubelet containers; want two", len(containers))
	}
	attacker, victim := containers[0], containers[1]
	attackerNode := strings.TrimSpace(s.Docker(t, "exec", attacker, "hostname"))
	victimNode := strings.TrimSpace(s.Docker(t, "exec", victim, "hostname"))
	node, err := s.client.CoreV1().Nodes().Get(ctx, victimNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var victimKubelet string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			victimKubelet = net.JoinHostPort(a.Address, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
		}
	}

	// On the other node, a pod and the Secret only it uses; on the attacker's, a pod of
	// the process runtime that copies its node's key where the attacker finds it.
	if _, err := s.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "victim-secret"},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "victim"}, Spec: corev1.PodSpec{NodeName: victimNode,
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}},
			Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "victim-secret"}}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "thief"}, Spec: corev1.PodSpec{NodeName: attackerNode, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Command: []string{"cp", "/var/lib/kubelet/pki/kubelet-client-current.pem", "/stolen.pem"}}}}},
	} {
		if _, err := s.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.eventually(t, time.Minute, "the thief done, the victim Running", func(ctx context.Context) error {
		for name, phase := range map[string]corev1.PodPhase{"thief": corev1.PodSucceeded, "victim": corev1.PodRunning} {
			p, err := s.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p.Status.Phase != phase {
				return fmt.Errorf("%s is %s", name, p.Status.Phase)
			}
		}
		return nil
	})
	tr, err := s.client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := clientcmd.Load([]byte(s.Docker(t, "exec", attacker, "cat", "/bootstrap/bootstrap-kubelet.kubeconfig")))
	if err != nil {
		t.Fatal(err)
	}
	var bootstrapToken string
	for _, auth := range bootstrap.AuthInfos {
		bootstrapToken = auth.Token
	}

	doors := attack.Doors{
		Etcd:              "https://etcd:2379",
		NATS:              "tls://nats:4222",
		OtherNodeSubject:  "skiff.events.default.system:node:" + strings.ReplaceAll(victimNode, ".", "_"),
		ExecProxyLog:      "https://exec-proxy:10443/api/v1/namespaces/default/pods/victim/log",
		KubeletLog:        "https://" + victimKubelet + "/containerLogs/default/victim/c",
		VictimSecret:      "https://apiserver:6443/api/v1/namespaces/default/secrets/victim-secret",
		KubeSystemSecrets: "https://apiserver:6443/api/v1/namespaces/kube-system/secrets",
	}
	nodeCred := attack.Credential{CertFile: "/var/lib/kubelet/pki/kubelet-client-current.pem"}
	plan := attack.Matrix(doors, []attack.Holder{
		{Who: "node certificate", Cred: nodeCred},
		{Who: "node key copied by a process-runtime pod", Cred: attack.Credential{CertFile: "/stolen.pem"}},
		{Who: "bootstrap token", Cred: attack.Credential{Token: bootstrapToken}},
		{Who: "pod ServiceAccount token", Cred: attack.Credential{Token: tr.Status.Token}},
	})
	own := "skiff.events.default.system:node:" + strings.ReplaceAll(attackerNode, ".", "_")
	forged := fmt.Appendf(nil, `{"metadata":{"name":"forged.1","namespace":"default"},"involvedObject":{"kind":"Pod","namespace":"default","name":"victim"},`+
		`"reason":"Attack","message":"reported as another node","type":"Warning","source":{"component":"kubelet","host":%q},"count":1}`, victimNode)
	before := s.refusedEvents(t, "node_restriction")
	// The last two are no attacks: the node may publish its own events (the door is
	// real), and the forged one passes NATS to be judged by the apiserver.
	plan = append(plan,
		attack.Attempt{Name: "control: node certificate → NATS: publish its own events", Door: attack.NATSPublish, Target: doors.NATS,
			Subject: own, Body: []byte(`{}`), Cred: nodeCred},
		attack.Attempt{Name: "node certificate → its own subject, an event naming another node", Door: attack.NATSPublish, Target: doors.NATS,
			Subject: own, Body: forged, Cred: nodeCred})

	verdicts := s.runAttacker(t, attacker, plan)
	for _, v := range verdicts {
		t.Run(v.Name, func(t *testing.T) {
			control := strings.HasPrefix(v.Name, "control:") || strings.Contains(v.Name, "an event naming another node")
			switch {
			case control && (v.Refused || strings.HasPrefix(v.Detail, "unreachable")):
				t.Errorf("the node's own publish did not get through: %s", v.Detail)
			case !control && !v.Refused:
				t.Errorf("not refused: %s", v.Detail)
			default:
				t.Logf("%v in %v: %s", map[bool]string{true: "refused", false: "allowed"}[v.Refused], v.Took, v.Detail)
			}
		})
	}
	s.eventually(t, 30*time.Second, "the forged event counted refused", func(context.Context) error {
		if n := s.refusedEvents(t, "node_restriction"); n != before+1 {
			return fmt.Errorf("node_restriction refusals %d, want %d", n, before+1)
		}
		return nil
	})
	if _, err := s.client.CoreV1().Events("default").Get(ctx, "forged.1", metav1.GetOptions{}); err == nil {
		t.Error("the event naming another node was stored")
	}
}

// runAttacker builds cmd/attacker, copies it into container and runs plan there.
func (s *stack) runAttacker(t *testing.T, container string, plan []attack.Attempt) []attack.Verdict {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "attacker")
	build := exec.CommandContext(s.ctx, "go", "build", "-o", bin, "skiff.dev/tests/security/cmd/attacker")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the attacker: %v\n%s", err, out)
	}
	s.Docker(t, "cp", bin, container+":/usr/local/bin/attacker")
	var in, out, stderr bytes.Buffer
	if err := attack.Encode(&in, plan); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(s.ctx, "docker", "exec", "-i", container, "/usr/local/bin/attacker")
	run.Stdin, run.Stdout, run.Stderr = &in, &out, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("the attacker: %v\n%s", err, stderr.String())
	}
	var verdicts []attack.Verdict
	if err := attack.Decode(&out, &verdicts); err != nil {
		t.Fatal(err)
	}
	if len(verdicts) != len(plan) {
		t.Fatalf("%d verdicts for %d attempts", len(verdicts), len(plan))
	}
	return verdicts
}

// refusedEvents is the apiserver's count of events its sink refused for reason.
func (s *stack) refusedEvents(t *testing.T, reason string) int {
	t.Helper()
	n, err := attack.RefusedEvents(s.ctx, s.client.CoreV1().RESTClient(), reason)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
