package admission_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/admission"
)

func TestServiceAccountAdmission(t *testing.T) {
	s := newStores()
	create(t, s.serviceAccounts, "sa", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	create(t, s.serviceAccounts, "sa", &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, AutomountServiceAccountToken: ptr.To(false)})
	plugin := admission.ServiceAccount{ServiceAccounts: s.serviceAccounts, RetryInterval: time.Millisecond}
	pods := corev1.SchemeGroupVersion.WithResource("pods")

	pod := func(mutate ...func(*corev1.Pod)) *corev1.Pod {
		p := newPod("sa", "web", "")
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "sidecar", Image: "busybox"})
		for _, m := range mutate {
			m(p)
		}
		return p
	}
	// tokenVolume is the one projected token volume the pod has, or nil.
	tokenVolume := func(t *testing.T, p *corev1.Pod) *corev1.Volume {
		t.Helper()
		var found *corev1.Volume
		for i, v := range p.Spec.Volumes {
			if strings.HasPrefix(v.Name, "kube-api-access-") {
				if found != nil {
					t.Fatalf("two token volumes: %+v", p.Spec.Volumes)
				}
				found = &p.Spec.Volumes[i]
			}
		}
		return found
	}
	// mounted lists the containers (init ones first) whose mount at the token path
	// names volume.
	mounted := func(p *corev1.Pod, volume string) []string {
		var names []string
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			for _, m := range c.VolumeMounts {
				if m.MountPath == admission.DefaultAPITokenMountPath && m.Name == volume && m.ReadOnly {
					names = append(names, c.Name)
				}
			}
		}
		return names
	}
	wantMounted := func(t *testing.T, p *corev1.Pod, want ...string) {
		t.Helper()
		v := tokenVolume(t, p)
		if v == nil {
			t.Fatalf("no kube-api-access volume in %+v", p.Spec.Volumes)
		}
		if got := mounted(p, v.Name); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("containers mounting %s at the token path: %v, want %v", v.Name, got, want)
		}
	}

	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		op      admission.Operation
		forbids string
		check   func(t *testing.T, p *corev1.Pod)
	}{
		{name: "a pod naming no service account runs as default", pod: pod(), check: func(t *testing.T, p *corev1.Pod) {
			if p.Spec.ServiceAccountName != "default" || p.Spec.DeprecatedServiceAccount != "default" {
				t.Fatalf("serviceAccountName %q, serviceAccount %q", p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount)
			}
		}},
		{name: "every container mounts the projected token volume read-only", pod: pod(), check: func(t *testing.T, p *corev1.Pod) {
			wantMounted(t, p, "init", "c", "sidecar")
		}},
		{name: "the volume projects a 3607 s token, the root CA and the namespace, as kube's does", pod: pod(), check: func(t *testing.T, p *corev1.Pod) {
			v := tokenVolume(t, p)
			want := &corev1.ProjectedVolumeSource{
				DefaultMode: ptr.To[int32](0o644),
				Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
						Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
						Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
				},
			}
			if v == nil || !apiequality.Semantic.DeepEqual(v.Projected, want) || len(v.Name) != len("kube-api-access-")+5 {
				t.Fatalf("volume %+v", v)
			}
		}},
		{name: "a pod whose service account does not exist is forbidden",
			pod:     pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "ghost" }),
			forbids: `pods "web" is forbidden: error looking up service account sa/ghost: serviceaccount "ghost" not found`},
		{name: "a pod in a namespace whose default service account never appears is forbidden",
			pod:     func() *corev1.Pod { p := pod(); p.Namespace = "empty"; return p }(),
			forbids: `error looking up service account empty/default: serviceaccount "default" not found`},
		{name: "a pod that opts out of automount gets no token", pod: pod(func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr.To(false) }),
			check: func(t *testing.T, p *corev1.Pod) {
				if v := tokenVolume(t, p); v != nil || len(mounted(p, "")) > 0 || p.Spec.ServiceAccountName != "default" {
					t.Fatalf("volume %+v, serviceAccountName %q", v, p.Spec.ServiceAccountName)
				}
			}},
		{name: "a service account that opts out of automount gives its pods no token", pod: pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "quiet" }),
			check: func(t *testing.T, p *corev1.Pod) {
				if v := tokenVolume(t, p); v != nil {
					t.Fatalf("volume %+v", v)
				}
			}},
		{name: "a pod's automount wins over its service account's", pod: pod(func(p *corev1.Pod) {
			p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken = "quiet", ptr.To(true)
		}), check: func(t *testing.T, p *corev1.Pod) { wantMounted(t, p, "init", "c", "sidecar") }},
		{name: "a container with its own mount at the token path keeps it", pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "mine", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			p.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "mine", MountPath: admission.DefaultAPITokenMountPath}}
		}), check: func(t *testing.T, p *corev1.Pod) {
			wantMounted(t, p, "init", "c")
			if m := p.Spec.Containers[1].VolumeMounts; len(m) != 1 || m[0].Name != "mine" {
				t.Fatalf("sidecar mounts %+v", m)
			}
		}},
		{name: "a pod that already has a kube-api-access volume keeps that one", pod: pod(func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: admission.TokenVolumeSource()}}}
		}), check: func(t *testing.T, p *corev1.Pod) {
			if v := tokenVolume(t, p); v == nil || v.Name != "kube-api-access-abcde" {
				t.Fatalf("volumes %+v", p.Spec.Volumes)
			}
			wantMounted(t, p, "init", "c", "sidecar")
		}},
		{name: "a mirror pod is left as it is", pod: pod(func(p *corev1.Pod) { p.Annotations = map[string]string{"kubernetes.io/config.mirror": "h"} }),
			check: func(t *testing.T, p *corev1.Pod) {
				if p.Spec.ServiceAccountName != "" || len(p.Spec.Volumes) != 0 {
					t.Fatalf("mirror pod changed: %+v", p.Spec)
				}
			}},
		{name: "a mirror pod may not reference a service account", pod: pod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "h"}
			p.Spec.ServiceAccountName = "default"
		}), forbids: "a mirror pod may not reference service accounts"},
		{name: "a mirror pod may not project a token", pod: pod(func(p *corev1.Pod) {
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "h"}
			p.Spec.Volumes = []corev1.Volume{{Name: "t", VolumeSource: corev1.VolumeSource{Projected: admission.TokenVolumeSource()}}}
		}), forbids: "a mirror pod may not use ServiceAccountToken volume projections"},
		{name: "an update is not changed", op: admission.Update, pod: pod(), check: func(t *testing.T, p *corev1.Pod) {
			if p.Spec.ServiceAccountName != "" || len(p.Spec.Volumes) != 0 {
				t.Fatalf("update changed: %+v", p.Spec)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := tc.op
			if op == "" {
				op = admission.Create
			}
			err := plugin.Admit(context.Background(), admission.Attributes{
				Operation: op, Resource: pods, Namespace: tc.pod.Namespace, Name: tc.pod.Name, Object: tc.pod,
			})
			if tc.forbids != "" {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.forbids) {
					t.Fatalf("err %v; want 403 saying %q", err, tc.forbids)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			tc.check(t, tc.pod)
		})
	}
}
