package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestVolumesAndEnv runs pods with configMap, secret and emptyDir volumes and env from a
// ConfigMap on the all-in-one with the process runtime, whose containers see their
// volumes at their mountPaths in their own mount namespaces, and reads them back with
// kubectl exec.
func TestVolumesAndEnv(t *testing.T) {
	c := startSkiff(t, "process")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.mustKubectl(ctx, "create", "configmap", "app", "--from-literal=LEVEL=debug", "--from-literal=app.conf=color=blue")
	c.mustKubectl(ctx, "create", "secret", "generic", "creds", "--from-literal=password=hunter2")

	sleeper := func(name string, mounts ...corev1.VolumeMount) corev1.Container {
		return corev1.Container{Name: name, Image: "busybox", Command: []string{"sleep", "3600"}, VolumeMounts: mounts}
	}
	create := func(t *testing.T, pod *corev1.Pod) {
		t.Helper()
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(t *testing.T, pod, container string, cmd ...string) string {
		t.Helper()
		out, err := c.kubectl(ctx, append([]string{"exec", pod, "-c", container, "--"}, cmd...)...)
		if err != nil {
			t.Fatalf("kubectl exec %s: %v\n%s", strings.Join(cmd, " "), err, out)
		}
		return out
	}

	t.Run("configMap and secret volumes at their mountPaths; a ConfigMap update reaches the file", func(t *testing.T) {
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "mounts"}, Spec: corev1.PodSpec{
			Volumes: []corev1.Volume{
				{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
				{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
			},
			Containers: []corev1.Container{sleeper("main",
				corev1.VolumeMount{Name: "cfg", MountPath: "/etc/app"},
				corev1.VolumeMount{Name: "sec", MountPath: "/var/run/creds"})},
		}})
		c.waitRunning(ctx, t, "mounts")
		if got := exec(t, "mounts", "main", "cat", "/etc/app/app.conf"); got != "color=blue" {
			t.Errorf("/etc/app/app.conf = %q", got)
		}
		if got := exec(t, "mounts", "main", "cat", "/var/run/creds/password"); got != "hunter2" {
			t.Errorf("/var/run/creds/password = %q", got)
		}
		if out, err := c.kubectl(ctx, "exec", "mounts", "--", "sh", "-c", "echo x > /etc/app/new"); err == nil {
			t.Errorf("a configMap volume was writable: %s", out)
		}

		c.mustKubectl(ctx, "patch", "configmap", "app", "--type=merge", "-p", `{"data":{"app.conf":"color=red"}}`)
		start := time.Now()
		eventually(t, 60*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "exec", "mounts", "--", "cat", "/etc/app/app.conf")
			return out == "color=red", fmt.Sprintf("app.conf = %q", out)
		})
		t.Logf("the update reached the mounted file after %s", time.Since(start).Round(time.Second))
	})

	t.Run("the service account token, CA and namespace at the projected kube-api-access volume", func(t *testing.T) {
		const dir = "/var/run/secrets/kubernetes.io/serviceaccount/"
		if got := exec(t, "mounts", "main", "cat", dir+"namespace"); got != "default" {
			t.Errorf("namespace = %q", got)
		}
		if got := exec(t, "mounts", "main", "cat", dir+"ca.crt"); !strings.HasPrefix(got, "-----BEGIN CERTIFICATE-----") {
			t.Errorf("ca.crt = %q", got)
		}
		token := exec(t, "mounts", "main", "cat", dir+"token")
		if strings.Count(token, ".") != 2 {
			t.Fatalf("token = %q, want a JWT", token)
		}
		// The token authenticates as the pod's service account.
		admin, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		asPod := &rest.Config{Host: admin.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile}}
		review, err := kubernetes.NewForConfigOrDie(asPod).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || review.Status.UserInfo.Username != "system:serviceaccount:default:default" {
			t.Errorf("whoami with the mounted token: %v, %v", review, err)
		}
	})

	t.Run("emptyDir shared by two containers of one pod", func(t *testing.T) {
		shared := corev1.VolumeMount{Name: "shared", MountPath: "/shared"}
		writer := sleeper("writer", shared)
		writer.Command = []string{"sh", "-c", "echo from-writer > /shared/note && exec sleep 3600"}
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "share"}, Spec: corev1.PodSpec{
			Volumes:    []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{writer, sleeper("reader", shared)},
		}})
		c.waitRunning(ctx, t, "share")
		eventually(t, 30*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "exec", "share", "-c", "reader", "--", "cat", "/shared/note")
			return out == "from-writer\n", fmt.Sprintf("reader sees %q", out)
		})
	})

	t.Run("env from a ConfigMap", func(t *testing.T) {
		main := sleeper("main")
		main.Env = []corev1.EnvVar{
			{Name: "LOG_LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "LEVEL"}}},
			{Name: "MSG", Value: "level=$(LOG_LEVEL)"},
		}
		main.EnvFrom = []corev1.EnvFromSource{{Prefix: "CM_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "env"}, Spec: corev1.PodSpec{Containers: []corev1.Container{main}}})
		c.waitRunning(ctx, t, "env")
		if got := exec(t, "env", "main", "sh", "-c", "echo $LOG_LEVEL $MSG $CM_LEVEL"); got != "debug level=debug debug\n" {
			t.Errorf("env = %q", got)
		}
	})

	t.Run("a missing ConfigMap key is CreateContainerConfigError", func(t *testing.T) {
		main := sleeper("main")
		main.Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "nope"}}}}
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "badenv"}, Spec: corev1.PodSpec{Containers: []corev1.Container{main}}})
		const message = "couldn't find key nope in ConfigMap default/app"
		eventually(t, 60*time.Second, func() (bool, string) {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "badenv", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := containerStatus(pod)
			if cs == nil || cs.State.Waiting == nil {
				return false, fmt.Sprintf("status %+v", pod.Status.ContainerStatuses)
			}
			w := cs.State.Waiting
			return w.Reason == "CreateContainerConfigError" && w.Message == message, fmt.Sprintf("waiting %s: %s", w.Reason, w.Message)
		})
		eventually(t, 30*time.Second, func() (bool, string) {
			out, _ := c.kubectl(ctx, "get", "events", "--field-selector", "involvedObject.name=badenv,reason=Failed", "-o", "jsonpath={.items[*].message}")
			return strings.Contains(out, "Error: "+message), fmt.Sprintf("Failed events: %q", out)
		})
	})

	t.Run("a container allocating past its memory limit is OOMKilled", func(t *testing.T) {
		hog := corev1.Container{Name: "hog", Image: "busybox", Command: []string{"sh", "-c", "tail /dev/zero"},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}}}
		create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "hog"}, Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{hog}}})
		eventually(t, 90*time.Second, func() (bool, string) {
			pod, err := c.Client.CoreV1().Pods("default").Get(ctx, "hog", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cs := containerStatus(pod)
			if cs == nil || cs.State.Terminated == nil {
				return false, fmt.Sprintf("status %+v", pod.Status.ContainerStatuses)
			}
			term := cs.State.Terminated
			return term.Reason == "OOMKilled" && term.ExitCode == 137, fmt.Sprintf("terminated %s, exit code %d", term.Reason, term.ExitCode)
		})
		if out := c.mustKubectl(ctx, "get", "pod", "hog", "--no-headers"); !strings.Contains(out, "OOMKilled") {
			t.Errorf("kubectl get pod hog: %q, want STATUS OOMKilled", out)
		}
	})
}
