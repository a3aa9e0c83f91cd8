package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/embedetcd"
	"skiff.dev/services/internal/pki"
)

// skiffEtcd runs `skiff etcd args...` and returns its exit code, stdout and stderr.
func skiffEtcd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := etcdMain(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// storedObject is an object of the backed-up cluster: where it is and what it was.
type storedObject struct {
	gvr             schema.GroupVersionResource
	namespace, name string
	uid, rv         string
}

// startOnEtcd runs an apiserver of srv's PKI over etcd (stopped when the test ends)
// and returns its admin clients.
func startOnEtcd(t *testing.T, srv *controlplanetest.Server, etcd *embedetcd.Etcd) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	client, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	cfg, err := apiserver.ConfigFromPKI(srv.PKIDir, client)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = api.Serve(ctx, l)
	}()
	t.Cleanup(func() { cancel(); <-done })
	if err := api.EnsureSystemNamespaces(ctx); err != nil {
		t.Fatal(err)
	}
	if err := api.WaitForBootstrapPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	rc := srv.ClientConfig(pki.Admin.CommonName, pki.Admin.Organizations...)
	rc.Host = "https://" + l.Addr().String()
	return kubernetes.NewForConfigOrDie(rc), dynamic.NewForConfigOrDie(rc)
}

// A snapshot saved from a running cluster's etcd and restored into a new data
// directory gives an etcd, and an apiserver over it, holding every object as it was when
// the snapshot was taken: same UIDs, same resourceVersions, nothing written after.
func TestSnapshotSaveAndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := controlplanetest.StartServerWithoutControllers(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)

	ns := "backup"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"a": "1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "password"}, StringData: map[string]string{"p": "s3cret"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "holder"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("me")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "backup-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objects := []storedObject{
		{gvr: corev1.SchemeGroupVersion.WithResource("namespaces"), name: ns},
		{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), namespace: ns, name: "settings"},
		{gvr: corev1.SchemeGroupVersion.WithResource("secrets"), namespace: ns, name: "password"},
		{gvr: corev1.SchemeGroupVersion.WithResource("services"), namespace: ns, name: "web"},
		{gvr: appsv1.SchemeGroupVersion.WithResource("deployments"), namespace: ns, name: "web"},
		{gvr: coordinationv1.SchemeGroupVersion.WithResource("leases"), namespace: ns, name: "holder"},
		{gvr: rbacv1.SchemeGroupVersion.WithResource("clusterroles"), name: "backup-reader"},
		{gvr: corev1.SchemeGroupVersion.WithResource("serviceaccounts"), namespace: ns, name: "robot"},
	}
	dyn := dynamic.NewForConfigOrDie(srv.Config)
	for i, o := range objects {
		got, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s %s/%s: %v", o.gvr.Resource, o.namespace, o.name, err)
		}
		objects[i].uid, objects[i].rv = string(got.GetUID()), got.GetResourceVersion()
	}

	// The default --pki-dir is $SKIFF_DATA_DIR/pki, the all-in-one's.
	t.Setenv("SKIFF_DATA_DIR", filepath.Dir(srv.PKIDir))
	dir := t.TempDir()
	file := filepath.Join(dir, "snapshot.db")
	code, out, errOut := skiffEtcd("snapshot", "save", file, "--endpoints", srv.Etcd.Endpoint())
	if code != 0 {
		t.Fatalf("save: exit %d: %s", code, errOut)
	}
	if !strings.HasPrefix(out, "Snapshot saved at "+file) {
		t.Fatalf("save printed %q", out)
	}
	t.Log(strings.TrimSpace(out))
	// Written after the snapshot: not in it.
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut = skiffEtcd("snapshot", "status", file)
	if code != 0 || !strings.Contains(out, "REVISION") {
		t.Fatalf("status: exit %d: %s%s", code, out, errOut)
	}
	lastRV := 0
	for _, o := range objects {
		rv, _ := strconv.Atoi(o.rv)
		lastRV = max(lastRV, rv)
	}
	fields := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	if snapRev, _ := strconv.Atoi(fields[1]); snapRev < lastRV {
		t.Fatalf("snapshot revision %d, below the last object's resourceVersion %d", snapRev, lastRV)
	}

	restored := filepath.Join(dir, "etcd")
	code, out, errOut = skiffEtcd("snapshot", "restore", file, "--data-dir", restored)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "member skiff") {
		t.Fatalf("restore printed %q", out)
	}
	// The all-in-one's embedded etcd (member skiff, mutual TLS of the same PKI) starts
	// from the restored directory.
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: restored, ClientURL: "https://127.0.0.1:0", PKIDir: srv.PKIDir})
	if err != nil {
		t.Fatalf("start etcd from the restored directory: %v", err)
	}
	t.Cleanup(etcd.Close)
	rcs, rdyn := startOnEtcd(t, srv, etcd)
	for _, o := range objects {
		got, err := rdyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("restored %s %s/%s: %v", o.gvr.Resource, o.namespace, o.name, err)
			continue
		}
		if string(got.GetUID()) != o.uid || got.GetResourceVersion() != o.rv {
			t.Errorf("restored %s %s/%s: uid %s resourceVersion %s, want %s %s", o.gvr.Resource, o.namespace, o.name,
				got.GetUID(), got.GetResourceVersion(), o.uid, o.rv)
		}
	}
	secret, err := rcs.CoreV1().Secrets(ns).Get(ctx, "password", metav1.GetOptions{})
	if err != nil || string(secret.Data["p"]) != "s3cret" {
		t.Errorf("restored Secret: %v %v", secret, err)
	}
	if _, err := rcs.CoreV1().ConfigMaps(ns).Get(ctx, "later", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a ConfigMap created after the snapshot: %v, want NotFound", err)
	}
	// Writes go on from the snapshot's revision.
	created, err := rcs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restore"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rv, _ := strconv.Atoi(created.ResourceVersion); rv <= lastRV {
		t.Errorf("a write after the restore got resourceVersion %d, not above %d", rv, lastRV)
	}

	t.Run("--bump-revision with --mark-compacted raises the revision and keeps the objects'", func(t *testing.T) {
		bumped := filepath.Join(dir, "bumped")
		if code, _, errOut := skiffEtcd("snapshot", "restore", file, "--data-dir", bumped, "--bump-revision", "1000000", "--mark-compacted"); code != 0 {
			t.Fatalf("restore: exit %d: %s", code, errOut)
		}
		etcd, err := embedetcd.Start(ctx, embedetcd.Config{Dir: bumped, ClientURL: "https://127.0.0.1:0", PKIDir: srv.PKIDir})
		if err != nil {
			t.Fatal(err)
		}
		defer etcd.Close()
		client, err := etcd.Client()
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		resp, err := client.Get(ctx, "/registry/configmaps/"+ns+"/settings")
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("get: %v %v", resp, err)
		}
		if resp.Header.Revision < 1000000 || strconv.FormatInt(resp.Kvs[0].ModRevision, 10) != objects[1].rv {
			t.Fatalf("revision %d, the ConfigMap's %d; want at least 1000000 and %s", resp.Header.Revision, resp.Kvs[0].ModRevision, objects[1].rv)
		}
	})

	t.Run("bad input is refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"snapshot", "restore", filepath.Join(dir, "missing.db"), "--data-dir", filepath.Join(dir, "x")}, 1, "no such file"},
			{[]string{"snapshot", "restore", file, "--data-dir", restored}, 1, "exists and is not empty"},
			{[]string{"snapshot", "restore", file}, 2, "--data-dir is required"},
			{[]string{"snapshot", "restore", file, "--data-dir", filepath.Join(dir, "y"), "--bump-revision", "10"}, 2, "go together"},
			{[]string{"snapshot", "save"}, 2, "want one FILE"},
			{[]string{"snapshot", "save", filepath.Join(dir, "two.db"), "--endpoints", srv.Etcd.Endpoint() + "," + srv.Etcd.Endpoint()}, 2, "one client URL"},
			{[]string{"snapshot", "save", filepath.Join(dir, "nowhere.db"), "--endpoints", "https://127.0.0.1:1", "--dial-timeout", "300ms"}, 1, "snapshot of https://127.0.0.1:1"},
			{[]string{"snapshot", "status", filepath.Join(dir, "missing.db")}, 1, "no such file"},
			{[]string{"snapshot", "list"}, 2, "usage:"},
			{[]string{"backup"}, 2, "usage:"},
		} {
			code, _, errOut := skiffEtcd(c.args...)
			if code != c.code || !strings.Contains(errOut, c.want) {
				t.Errorf("skiff etcd %s: exit %d, %q; want exit %d naming %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
			t.Errorf("a refused restore left its data directory behind: %v", err)
		}
	})
}
