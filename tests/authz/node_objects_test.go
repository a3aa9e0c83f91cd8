package authz

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// TestNodeReadsOnlyTheObjectsItsPodsUse pins the Node authorizer's graph rules for
// Secrets and ConfigMaps: a kubelet gets those its pods use (volumes, env, envFrom),
// nothing else, and never lists them.
func TestNodeReadsOnlyTheObjectsItsPodsUse(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	for _, name := range []string{"vol-secret", "env-secret", "other-secret"} {
		if _, err := c.admin.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"projected-cm", "envfrom-cm", "other-cm"} {
		if _, err := c.admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "uses-objects"}, Spec: corev1.PodSpec{
		NodeName: "node-a",
		Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "projected-cm"}}},
			}}}},
		},
		Containers: []corev1.Container{{Name: "c", Image: "busybox",
			Env: []corev1.EnvVar{{Name: "PW", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "env-secret"}, Key: "k"}}}},
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "envfrom-cm"}}}},
		}},
	}}
	if _, err := c.admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	getSecret := func(node, name string) error {
		if node == "a" {
			_, err := c.nodeA.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
			return err
		}
		_, err := c.nodeB.CoreV1().Secrets("default").Get(ctx, name, metav1.GetOptions{})
		return err
	}
	getConfigMap := func(node, name string) error {
		if node == "a" {
			_, err := c.nodeA.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
			return err
		}
		_, err := c.nodeB.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
		return err
	}
	tests := []struct {
		name string
		err  func() error
		code int32
	}{
		{"node A gets a Secret its pod mounts", func() error { return getSecret("a", "vol-secret") }, 0},
		{"node A gets a Secret its pod's env reads", func() error { return getSecret("a", "env-secret") }, 0},
		{"node A gets a ConfigMap of its pod's projected volume", func() error { return getConfigMap("a", "projected-cm") }, 0},
		{"node A gets a ConfigMap of its pod's envFrom", func() error { return getConfigMap("a", "envfrom-cm") }, 0},
		{"node A gets a Secret no pod of it uses: 403", func() error { return getSecret("a", "other-secret") }, 403},
		{"node A gets a ConfigMap no pod of it uses: 403", func() error { return getConfigMap("a", "other-cm") }, 403},
		{"node B gets a Secret only node A's pod uses: 403", func() error { return getSecret("b", "vol-secret") }, 403},
		{"node A lists Secrets: 403", func() error {
			_, err := c.nodeA.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
			return err
		}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.err(), tt.code) })
	}
}

// TestNodeRequestsTokensOnlyForItsPodsServiceAccounts pins the Node authorizer's rule
// for serviceaccounts/token: a kubelet gets a token for a service account one of its
// own pods runs as, bound to that pod, right after the pod is created (a lagging watch
// cache does not refuse it), and for no other.
func TestNodeRequestsTokensOnlyForItsPodsServiceAccounts(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	for _, name := range []string{"runner", "idle"} {
		if _, err := c.admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := c.admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "runs-as-runner"}, Spec: corev1.PodSpec{
		NodeName: "node-a", ServiceAccountName: "runner", Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	request := func(node kubernetes.Interface, serviceAccount string) error {
		_, err := node.CoreV1().ServiceAccounts("default").CreateToken(ctx, serviceAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
		}, metav1.CreateOptions{})
		return err
	}
	if err := request(c.nodeA, "runner"); err != nil {
		t.Errorf("node-a asks for the token of its pod's service account: %v", err)
	}
	if err := request(c.nodeB, "runner"); !apierrors.IsForbidden(err) {
		t.Errorf("node-b asks for the token of node-a's pod's service account: %v, want 403", err)
	}
	if err := request(c.nodeA, "idle"); !apierrors.IsForbidden(err) {
		t.Errorf("node-a asks for the token of a service account none of its pods runs as: %v, want 403", err)
	}
}

// TestNodeWritesOnlyItsOwnCSINode is the attack on another node's CSI registration: node
// A may create, update and delete the CSINode named after it, but creating, reading,
// updating, patching or deleting node B's is refused (the Node authorizer checks the name
// in the URL, NodeRestriction the one in a create's body); node A reads CSIDrivers but
// writes none, and gets only the VolumeAttachments of its own node.
func TestNodeWritesOnlyItsOwnCSINode(t *testing.T) {
	c := setup(t)
	ctx := context.Background()
	csiNode := func(name string) *storagev1.CSINode {
		return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "csi.example.com", NodeID: name}}}}
	}
	if _, err := c.nodeA.StorageV1().CSINodes().Create(ctx, csiNode("node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node A registers its own CSINode: %v", err)
	}
	if _, err := c.nodeB.StorageV1().CSINodes().Create(ctx, csiNode("node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node B registers its own CSINode: %v", err)
	}
	if _, err := c.admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-a", "node-b"} {
		if _, err := c.admin.StorageV1().VolumeAttachments().Create(ctx, &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va-" + node},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: "csi.example.com", NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-" + node)}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodeA := c.nodeA.StorageV1()
	tests := []struct {
		name string
		err  func() error
		code int32
	}{
		{"node A creates a CSINode named for node C: 403", func() error {
			_, err := nodeA.CSINodes().Create(ctx, csiNode("node-c"), metav1.CreateOptions{})
			return err
		}, 403},
		{"node A gets node B's CSINode: 403", func() error {
			_, err := nodeA.CSINodes().Get(ctx, "node-b", metav1.GetOptions{})
			return err
		}, 403},
		{"node A updates node B's CSINode: 403", func() error {
			n, err := c.admin.StorageV1().CSINodes().Get(ctx, "node-b", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: "evil.example.com", NodeID: "node-a"})
			_, err = nodeA.CSINodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}, 403},
		{"node A patches node B's CSINode: 403", func() error {
			_, err := nodeA.CSINodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"owned":"true"}}}`), metav1.PatchOptions{})
			return err
		}, 403},
		{"node A deletes node B's CSINode: 403", func() error {
			return nodeA.CSINodes().Delete(ctx, "node-b", metav1.DeleteOptions{})
		}, 403},
		{"node A lists CSINodes: 403", func() error {
			_, err := nodeA.CSINodes().List(ctx, metav1.ListOptions{})
			return err
		}, 403},
		{"node A updates its own CSINode", func() error {
			n, err := nodeA.CSINodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Drivers = append(n.Spec.Drivers, storagev1.CSINodeDriver{Name: "other.example.com", NodeID: "node-a"})
			_, err = nodeA.CSINodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		}, 0},
		{"node A lists CSIDrivers", func() error {
			_, err := nodeA.CSIDrivers().List(ctx, metav1.ListOptions{})
			return err
		}, 0},
		{"node A deletes a CSIDriver: 403", func() error {
			return nodeA.CSIDrivers().Delete(ctx, "csi.example.com", metav1.DeleteOptions{})
		}, 403},
		{"node A gets its node's VolumeAttachment", func() error {
			_, err := nodeA.VolumeAttachments().Get(ctx, "va-node-a", metav1.GetOptions{})
			return err
		}, 0},
		{"node A gets node B's VolumeAttachment: 403", func() error {
			_, err := nodeA.VolumeAttachments().Get(ctx, "va-node-b", metav1.GetOptions{})
			return err
		}, 403},
		{"node A marks its node's VolumeAttachment attached: 403", func() error {
			_, err := nodeA.VolumeAttachments().Patch(ctx, "va-node-a", types.MergePatchType, []byte(`{"status":{"attached":true}}`), metav1.PatchOptions{}, "status")
			return err
		}, 403},
		{"node A deletes its own CSINode", func() error {
			return nodeA.CSINodes().Delete(ctx, "node-a", metav1.DeleteOptions{})
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.err(), tt.code) })
	}
	n, err := c.admin.StorageV1().CSINodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil || len(n.Spec.Drivers) != 1 || n.Labels["owned"] != "" {
		t.Errorf("node B's CSINode after the attacks: %v %+v", err, n)
	}
}
