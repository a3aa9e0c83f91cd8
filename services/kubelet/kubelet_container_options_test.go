package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/kubelet/container"
	"skiff.dev/services/kubelet/util/manager"
	"skiff.dev/services/kubelet/volumemanager"
)

func TestMakeEnvironmentVariables(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Data:       map[string]string{"LEVEL": "debug", "PORT": "8080"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets("default").Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"password": []byte("hunter2"), "USER": []byte("admin")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	optional := true
	cmKey := func(name, key string, opt *bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: opt}}
	}
	secretKey := func(name, key string, opt *bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: name}, Key: key, Optional: opt}}
	}
	field := func(path string) *v1.EnvVarSource {
		return &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}
	}
	tests := []struct {
		name    string
		env     []v1.EnvVar
		envFrom []v1.EnvFromSource
		want    []container.EnvVar // nil with wantErr
		wantErr string
		event   string
	}{
		{name: "plain values expand earlier variables",
			env:  []v1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "$(A)-$(C)-$$(A)"}, {Name: "C", Value: "late"}},
			want: []container.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "x-$(C)-$(A)"}, {Name: "C", Value: "late"}}},
		{name: "fieldRef: metadata and what only the kubelet knows",
			env: []v1.EnvVar{{Name: "NAME", ValueFrom: field("metadata.name")}, {Name: "NS", ValueFrom: field("metadata.namespace")},
				{Name: "APP", ValueFrom: field("metadata.labels['app']")}, {Name: "NODE", ValueFrom: field("spec.nodeName")},
				{Name: "HOST_IP", ValueFrom: field("status.hostIP")}, {Name: "POD_IP", ValueFrom: field("status.podIP")},
				{Name: "SA", ValueFrom: field("spec.serviceAccountName")}},
			want: []container.EnvVar{{Name: "NAME", Value: "web"}, {Name: "NS", Value: "default"}, {Name: "APP", Value: "shop"},
				{Name: "NODE", Value: "node-1"}, {Name: "HOST_IP", Value: "10.1.1.1"}, {Name: "POD_IP", Value: "10.2.2.2"}, {Name: "SA", Value: "builder"}}},
		{name: "resourceFieldRef: own request, and the node's allocatable for a missing limit",
			env: []v1.EnvVar{
				{Name: "CPU_M", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
				{Name: "MEM_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory"}}},
			},
			want: []container.EnvVar{{Name: "CPU_M", Value: "250"}, {Name: "MEM_LIMIT", Value: "4294967296"}}},
		{name: "configMapKeyRef and secretKeyRef",
			env:  []v1.EnvVar{{Name: "LOG", ValueFrom: cmKey("app", "LEVEL", nil)}, {Name: "PW", ValueFrom: secretKey("creds", "password", nil)}, {Name: "BOTH", Value: "$(LOG):$(PW)"}},
			want: []container.EnvVar{{Name: "LOG", Value: "debug"}, {Name: "PW", Value: "hunter2"}, {Name: "BOTH", Value: "debug:hunter2"}}},
		{name: "missing ConfigMap key is kube's error",
			env: []v1.EnvVar{{Name: "X", ValueFrom: cmKey("app", "MISSING", nil)}}, wantErr: "couldn't find key MISSING in ConfigMap default/app"},
		{name: "missing Secret key is kube's error",
			env: []v1.EnvVar{{Name: "X", ValueFrom: secretKey("creds", "token", nil)}}, wantErr: "couldn't find key token in Secret default/creds"},
		{name: "missing ConfigMap",
			env: []v1.EnvVar{{Name: "X", ValueFrom: cmKey("nope", "k", nil)}}, wantErr: `configmaps "nope" not found`},
		{name: "missing Secret",
			env: []v1.EnvVar{{Name: "X", ValueFrom: secretKey("nope", "k", nil)}}, wantErr: `secrets "nope" not found`},
		{name: "optional references to missing objects and keys drop the variable",
			env: []v1.EnvVar{{Name: "A", ValueFrom: cmKey("nope", "k", &optional)}, {Name: "B", ValueFrom: cmKey("app", "MISSING", &optional)},
				{Name: "C", ValueFrom: secretKey("nope", "k", &optional)}, {Name: "D", Value: "kept"}},
			want: []container.EnvVar{{Name: "D", Value: "kept"}}},
		{name: "envFrom names that are no valid variable names are skipped with an event",
			envFrom: []v1.EnvFromSource{{Prefix: "A=", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}},
			want:    []container.EnvVar{},
			event:   "Warning InvalidEnvironmentVariableNames Keys [A=LEVEL, A=PORT] from the EnvFrom configMap default/app were skipped"},
		{name: "envFrom with prefix; env replaces envFrom",
			envFrom: []v1.EnvFromSource{
				{Prefix: "CFG_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}},
				{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "creds"}}},
				{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Optional: &optional}},
			},
			env: []v1.EnvVar{{Name: "CFG_PORT", Value: "9090"}, {Name: "URL", Value: "http://$(USER)@host:$(CFG_PORT)"}},
			want: []container.EnvVar{{Name: "CFG_LEVEL", Value: "debug"}, {Name: "CFG_PORT", Value: "9090"},
				{Name: "USER", Value: "admin"}, {Name: "password", Value: "hunter2"}, {Name: "URL", Value: "http://admin@host:9090"}}},
		{name: "envFrom a missing ConfigMap",
			envFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nope"}}}},
			wantErr: `configmaps "nope" not found`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// client-go's FakeRecorder: the events are what the test reads.
			recorder := record.NewFakeRecorder(10)
			kl := &Kubelet{kubeClient: client, nodeIP: "10.1.1.1", recorder: recorder,
				configMapManager: manager.NewConfigMapManager(client), secretManager: manager.NewSecretManager(client),
				nodeAllocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi")}}
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1", Labels: map[string]string{"app": "shop"}},
				Spec: v1.PodSpec{NodeName: "node-1", ServiceAccountName: "builder", Containers: []v1.Container{{
					Name: "c", Env: tt.env, EnvFrom: tt.envFrom,
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}},
				}}},
			}
			kl.registerPodObjects(pod)
			defer kl.unregisterPodObjects(pod)
			got, err := kl.makeEnvironmentVariables(ctx, pod, &pod.Spec.Containers[0], []string{"10.2.2.2"})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("env = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("env[%d] = %v, want %v", i, got[i], tt.want[i])
				}
			}
			if tt.event != "" {
				select {
				case e := <-recorder.Events:
					if !strings.HasPrefix(e, tt.event) {
						t.Errorf("event = %q, want %q", e, tt.event)
					}
				default:
					t.Errorf("no event, want %q", tt.event)
				}
			}
		})
	}
}

func TestMakeMounts(t *testing.T) {
	volDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(volDir, "data/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(volDir, "escape")); err != nil {
		t.Fatal(err)
	}
	volumes := map[string]volumemanager.MountedVolume{
		"work": {Path: volDir},
		"cfg":  {Path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~configmap/cfg", ReadOnly: true},
	}
	envs := []container.EnvVar{{Name: "POD", Value: "web-1"}, {Name: "EMPTY", Value: ""}}
	tests := []struct {
		name    string
		mount   v1.VolumeMount
		want    container.Mount
		wantErr string
	}{
		{name: "whole volume", mount: v1.VolumeMount{Name: "work", MountPath: "/work"},
			want: container.Mount{Name: "work", ContainerPath: "/work", HostPath: volDir}},
		{name: "a read-only volume stays read-only", mount: v1.VolumeMount{Name: "cfg", MountPath: "/etc/app"},
			want: container.Mount{Name: "cfg", ContainerPath: "/etc/app", HostPath: volumes["cfg"].Path, ReadOnly: true}},
		{name: "readOnly volumeMount", mount: v1.VolumeMount{Name: "work", MountPath: "/work", ReadOnly: true},
			want: container.Mount{Name: "work", ContainerPath: "/work", HostPath: volDir, ReadOnly: true}},
		{name: "subPath is the host path", mount: v1.VolumeMount{Name: "work", MountPath: "/app", SubPath: "data/app"},
			want: container.Mount{Name: "work", ContainerPath: "/app", HostPath: filepath.Join(volDir, "data/app")}},
		{name: "missing subPath is created", mount: v1.VolumeMount{Name: "work", MountPath: "/new", SubPath: "fresh"},
			want: container.Mount{Name: "work", ContainerPath: "/new", HostPath: filepath.Join(volDir, "fresh")}},
		{name: "subPathExpr expands from the environment", mount: v1.VolumeMount{Name: "work", MountPath: "/logs", SubPathExpr: "logs/$(POD)"},
			want: container.Mount{Name: "work", ContainerPath: "/logs", HostPath: filepath.Join(volDir, "logs/web-1")}},
		{name: "subPathExpr with an empty variable is refused", mount: v1.VolumeMount{Name: "work", MountPath: "/x", SubPathExpr: "$(EMPTY)"}, wantErr: "missing value for EMPTY"},
		{name: "subPath with .. is refused", mount: v1.VolumeMount{Name: "work", MountPath: "/x", SubPath: "data/../../etc"}, wantErr: "must not contain '..'"},
		{name: "absolute subPath is refused", mount: v1.VolumeMount{Name: "work", MountPath: "/x", SubPath: "/etc"}, wantErr: "must not be an absolute path"},
		{name: "subPath through a symlink out of the volume is refused", mount: v1.VolumeMount{Name: "work", MountPath: "/x", SubPath: "escape"}, wantErr: "outside the volume"},
		{name: "unknown volume", mount: v1.VolumeMount{Name: "nope", MountPath: "/x"}, wantErr: `cannot find volume "nope" to mount into container "c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1.Container{Name: "c", VolumeMounts: []v1.VolumeMount{tt.mount}}
			got, err := makeMounts(c, volumes, envs)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0].Name != tt.want.Name || got[0].ContainerPath != tt.want.ContainerPath || got[0].HostPath != tt.want.HostPath || got[0].ReadOnly != tt.want.ReadOnly {
				t.Errorf("mounts = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestPodObjectsStayWatchedUntilTheVolumesAreDown: a pod's update to Succeeded keeps its
// ConfigMap watched (a volume rewrite may still come before SyncTerminatedPod takes the
// volumes down), a pod already ended is not registered, and unregistering releases it.
func TestPodObjectsStayWatchedUntilTheVolumesAreDown(t *testing.T) {
	client := kubernetes.NewForConfigOrDie(controlplanetest.Start(t))
	ctx := context.Background()
	kl := &Kubelet{configMapManager: manager.NewConfigMapManager(client), secretManager: manager.NewSecretManager(client)}
	t.Cleanup(kl.configMapManager.Stop)
	t.Cleanup(kl.secretManager.Stop)
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podUsing := func(uid string, phase v1.PodPhase) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: uid, UID: types.UID(uid)},
			Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{
				ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}}},
			Status: v1.PodStatus{Phase: phase}}
	}

	kl.registerPodObjects(podUsing("ended", v1.PodSucceeded))
	if _, err := kl.GetConfigMap(ctx, "default", "app"); err == nil {
		t.Fatal("a pod that had already ended registered its ConfigMap")
	}
	running := podUsing("job", v1.PodRunning)
	kl.registerPodObjects(running)
	kl.registerPodObjects(podUsing("job", v1.PodSucceeded))
	if _, err := kl.GetConfigMap(ctx, "default", "app"); err != nil {
		t.Fatalf("after the update to Succeeded: %v, want the ConfigMap still watched", err)
	}
	kl.unregisterPodObjects(running)
	if _, err := kl.GetConfigMap(ctx, "default", "app"); err == nil {
		t.Fatal("the ConfigMap is still served after its only pod was unregistered")
	}
}
