package kubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestKubeletMountsVolumesAndResolvesEnv runs a pod with volumes, env from a ConfigMap
// and limits on a sim runtime: the runtime receives the mounts, env and cgroup
// resources, a missing key holds a second container in CreateContainerConfigError, and
// deleting the pod removes its volumes.
func TestKubeletMountsVolumesAndResolvesEnv(t *testing.T) {
	client := startAPIServer(t)
	cri := startSim(t)
	rootDir := rootDir(t)
	runKubelet(t, client, cri.Socket, rootDir)
	ctx := context.Background()
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "app"}, Data: map[string]string{"LEVEL": "debug"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := newPod("vols", v1.RestartPolicyAlways, nil)
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}
	main := &pod.Spec.Containers[0]
	main.VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/etc/app"}, {Name: "scratch", MountPath: "/scratch"}}
	main.Env = []v1.EnvVar{{Name: "LEVEL", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Key: "LEVEL"}}}}
	main.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}
	broken := v1.Container{Name: "broken", Image: "busybox:1.36", Command: []string{"sleep", "3600"},
		Env: []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "app"}, Key: "nope"}}}}}
	pod.Spec.Containers = append(pod.Spec.Containers, broken)
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podDir := filepath.Join(rootDir, "pods", string(created.UID))

	var status *runtimeapi.ContainerStatus
	eventually(t, 30*time.Second, "main container runs", func() error {
		list, err := cri.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return err
		}
		for _, c := range list.GetContainers() {
			if c.GetMetadata().GetName() == "main" && c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
				resp, err := cri.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.GetId()})
				if err != nil {
					return err
				}
				status = resp.GetStatus()
				return nil
			}
		}
		return fmt.Errorf("not running yet")
	})
	mounts := map[string]*runtimeapi.Mount{}
	for _, m := range status.GetMounts() {
		mounts[m.GetContainerPath()] = m
	}
	if m := mounts["/etc/app"]; m == nil || m.GetHostPath() != filepath.Join(podDir, "volumes/kubernetes.io~configmap/cfg") || !m.GetReadonly() {
		t.Errorf("/etc/app mount = %v", m)
	}
	if m := mounts["/scratch"]; m == nil || m.GetHostPath() != filepath.Join(podDir, "volumes/kubernetes.io~empty-dir/scratch") || m.GetReadonly() {
		t.Errorf("/scratch mount = %v", m)
	}
	if b, err := os.ReadFile(filepath.Join(podDir, "volumes/kubernetes.io~configmap/cfg/LEVEL")); err != nil || string(b) != "debug" {
		t.Errorf("configMap file = %q, %v", b, err)
	}
	if r := status.GetResources().GetLinux(); r.GetCpuShares() != 512 || r.GetCpuQuota() != 100000 || r.GetMemoryLimitInBytes() != 128<<20 || r.GetOomScoreAdj() <= 0 || r.GetOomScoreAdj() >= 1000 {
		t.Errorf("resources = %v, want Burstable shares 512, quota 100000, 128Mi, oom_score_adj in (0,1000)", r)
	}

	eventually(t, 30*time.Second, "broken container waits in CreateContainerConfigError", func() error {
		p, err := client.CoreV1().Pods("default").Get(ctx, "vols", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == "broken" && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError" &&
				cs.State.Waiting.Message == "couldn't find key nope in ConfigMap default/app" {
				return nil
			}
		}
		return fmt.Errorf("statuses %+v", p.Status.ContainerStatuses)
	})

	zero := int64(0)
	if err := client.CoreV1().Pods("default").Delete(ctx, "vols", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "pod gone and its directory removed", func() error {
		if _, err := client.CoreV1().Pods("default").Get(ctx, "vols", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod still there (%v)", err)
		}
		if _, err := os.Stat(podDir); !os.IsNotExist(err) {
			return fmt.Errorf("pod directory still there (%v)", err)
		}
		return nil
	})
}
