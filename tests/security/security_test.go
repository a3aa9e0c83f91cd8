// Package security attacks the all-in-one (the skiff binary `make run` starts, with the
// process runtime) from every credential the cluster hands out: a node's client
// certificate, the kube-proxy certificate, a bootstrap token, a pod's ServiceAccount
// token, and a pod of the process runtime, which can read its node's key. Each row tries
// one escalation through one door (etcd, NATS, exec-proxy, the kubelet API, the API's
// certificate and secret rules) and must be refused. The compose suite (tests/compose)
// runs the same attempts from inside a node's container of the full stack.
package security

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/tests/internal/skifftest"
	"skiff.dev/tests/security/attack"
)

// skiffBinary is built once by TestMain.
var skiffBinary string

func TestMain(m *testing.M) { skifftest.Main(m, &skiffBinary) }

// nodeName is the all-in-one's node; hollow-0 is the other one.
const (
	nodeName  = "security-node"
	otherNode = "hollow-0"
)

// target is a running all-in-one and the credentials it handed out.
type target struct {
	*skifftest.Cluster
	etcdURL, natsURL, execProxyURL, kubeletURL string

	node, kubeProxy, stolen attack.Credential // client certificates
	bootstrapToken, saToken string
	// victim is a pod bound to the other node, using the Secret victimSecret.
	victim, victimSecret string
}

func startTarget(t *testing.T) *target {
	t.Helper()
	etcdPort, execProxyPort := freePort(t), freePort(t)
	c := skifftest.Start(t, skiffBinary, "--runtime", "process", "--node-name", nodeName, "--hollow-nodes", "1",
		"--etcd-port", strconv.Itoa(etcdPort), "--exec-proxy-port", strconv.Itoa(execProxyPort))
	tg := &target{Cluster: c,
		etcdURL:      "https://127.0.0.1:" + strconv.Itoa(etcdPort),
		execProxyURL: "https://127.0.0.1:" + strconv.Itoa(execProxyPort),
		victim:       "victim", victimSecret: "victim-secret",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{nodeName, otherNode} {
		if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			return err == nil && n.Status.DaemonEndpoints.KubeletEndpoint.Port != 0, nil
		}); err != nil {
			t.Fatalf("node %s did not register: %v", name, err)
		}
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			tg.kubeletURL = "https://" + net.JoinHostPort(a.Address, strconv.Itoa(int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)))
		}
	}
	tg.node = attack.Credential{CertFile: filepath.Join(c.DataDir, "kubelet", "pki", "kubelet-client-current.pem")}
	tg.kubeProxy = attack.Credential{CertFile: filepath.Join(c.DataDir, "pki", "kube-proxy.crt"), KeyFile: filepath.Join(c.DataDir, "pki", "kube-proxy.key")}
	tg.bootstrapToken = firstBootstrapToken(t, filepath.Join(c.DataDir, "pki", "bootstrap-tokens.csv"))

	// A pod's ServiceAccount token, as a pod on this node is given one.
	tr, err := c.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest: %v", err)
	}
	tg.saToken = tr.Status.Token

	// The victim: a Secret used by a pod on the other node only.
	if _, err := c.Client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: tg.victimSecret},
		StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tg.victim}, Spec: corev1.PodSpec{
		NodeName:   otherNode,
		Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}},
		Volumes:    []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: tg.victimSecret}}}},
	}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tg.stolen = stealNodeKey(ctx, t, c.Client, tg.node.CertFile)
	return tg
}

// stealNodeKey runs a pod on the process runtime that reads its node's key pair, as
// any such pod can (its processes are the node's), and returns what it read.
func stealNodeKey(ctx context.Context, t *testing.T, client kubernetes.Interface, keyFile string) attack.Credential {
	t.Helper()
	thief := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "thief"}, Spec: corev1.PodSpec{
		NodeName:      nodeName,
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"cat", keyFile}}},
	}}
	if _, err := client.CoreV1().Pods("default").Create(ctx, thief, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pem []byte
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "thief", metav1.GetOptions{})
		if err != nil || pod.Status.Phase != corev1.PodSucceeded {
			return false, nil
		}
		pem, err = client.CoreV1().Pods("default").GetLogs("thief", &corev1.PodLogOptions{}).DoRaw(ctx)
		return err == nil && strings.Contains(string(pem), "PRIVATE KEY"), nil
	}); err != nil {
		t.Fatalf("the process-runtime pod did not read its node's key: %v", err)
	}
	return attack.Credential{CertPEM: pem, KeyPEM: pem}
}

// TestEveryCredentialIsRefusedBeyondItsJob: each credential against each door it has
// no business at (attack.Matrix), and a control per door.
func TestEveryCredentialIsRefusedBeyondItsJob(t *testing.T) {
	tg := startTarget(t)
	logPath := "/api/v1/namespaces/default/pods/thief/log"
	doors := attack.Doors{
		Etcd:              tg.etcdURL,
		NATS:              tg.NATSURL,
		OtherNodeSubject:  "skiff.events.default.system:node:" + otherNode,
		ExecProxyLog:      tg.execProxyURL + logPath,
		KubeletLog:        tg.kubeletURL + "/containerLogs/default/thief/c",
		VictimSecret:      tg.RESTConfig.Host + "/api/v1/namespaces/default/secrets/" + tg.victimSecret,
		KubeSystemSecrets: tg.RESTConfig.Host + "/api/v1/namespaces/kube-system/secrets",
	}
	holders := []attack.Holder{
		{Who: "node certificate", Cred: tg.node},
		{Who: "kube-proxy certificate", Cred: tg.kubeProxy},
		{Who: "node key stolen by a process-runtime pod", Cred: tg.stolen},
		{Who: "bootstrap token", Cred: attack.Credential{Token: tg.bootstrapToken}},
		{Who: "pod ServiceAccount token", Cred: attack.Credential{Token: tg.saToken}},
	}
	// The same doors open to the one credential whose job it is: each row knocked on a
	// real, reachable door.
	pkiPair := func(name string) attack.Credential {
		return attack.Credential{CertFile: filepath.Join(tg.DataDir, "pki", name+".crt"), KeyFile: filepath.Join(tg.DataDir, "pki", name+".key")}
	}
	controls := []attack.Attempt{
		{Name: "apiserver-etcd-client → etcd: read /registry", Door: attack.EtcdRead, Target: doors.Etcd, Cred: pkiPair("apiserver-etcd-client")},
		{Name: "apiserver-nats-client → NATS: JetStream API information", Door: attack.NATSRequest, Target: doors.NATS, Subject: "$JS.API.INFO",
			Cred: pkiPair("apiserver-nats-client")},
		{Name: "node certificate → NATS: publish its own events", Door: attack.NATSPublish, Target: doors.NATS,
			Subject: "skiff.events.default.system:node:" + nodeName, Body: []byte(`{}`), Cred: tg.node},
		{Name: "front-proxy-client → exec-proxy", Door: attack.HTTP, Target: doors.ExecProxyLog, Cred: pkiPair("front-proxy-client")},
		{Name: "exec-proxy → kubelet API: container logs", Door: attack.HTTP, Target: doors.KubeletLog, Cred: pkiPair("exec-proxy")},
		{Name: "admin → API: the Secret", Door: attack.HTTP, Target: doors.VictimSecret, Cred: pkiPair("admin")},
	}
	requireRefused(t, attack.RunAll(context.Background(), attack.Matrix(doors, holders)))
	requireAllowed(t, attack.RunAll(context.Background(), controls))
}

// requireRefused fails each verdict whose door did not hold.
func requireRefused(t *testing.T, verdicts []attack.Verdict) {
	t.Helper()
	for _, v := range verdicts {
		t.Run(v.Name, func(t *testing.T) {
			if !v.Refused {
				t.Errorf("not refused: %s", v.Detail)
			} else {
				t.Logf("refused in %v: %s", v.Took, v.Detail)
			}
		})
	}
}

// firstBootstrapToken is the first token of a bootstrap token file.
func firstBootstrapToken(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			tok, _, _ := strings.Cut(line, ",")
			return tok
		}
	}
	t.Fatalf("%s holds no token", path)
	return ""
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

// requireAllowed fails each verdict whose door held: a control, showing that the door
// the refused rows knocked on is the real one.
func requireAllowed(t *testing.T, verdicts []attack.Verdict) {
	t.Helper()
	for _, v := range verdicts {
		t.Run("control: "+v.Name, func(t *testing.T) {
			if v.Refused || strings.HasPrefix(v.Detail, "unreachable") || strings.HasPrefix(v.Detail, "credential") {
				t.Errorf("the door's own credential did not get through: %s", v.Detail)
			}
		})
	}
}
