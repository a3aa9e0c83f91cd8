package fieldpath

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExtractFieldPathAsString(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "web", Namespace: "prod", UID: "u-1",
		Labels:      map[string]string{"b": "2", "a": "1"},
		Annotations: map[string]string{"note": "say \"hi\"\nbye"},
	}}
	tests := []struct {
		path, want string
		wantErr    bool
	}{
		{path: "metadata.name", want: "web"},
		{path: "metadata.namespace", want: "prod"},
		{path: "metadata.uid", want: "u-1"},
		{path: "metadata.labels", want: "a=\"1\"\nb=\"2\""},
		{path: "metadata.annotations", want: `note="say \"hi\"\nbye"`},
		{path: "metadata.labels['b']", want: "2"},
		{path: "metadata.labels['missing']", want: ""},
		{path: "metadata.annotations['note']", want: "say \"hi\"\nbye"},
		{path: "spec.nodeName", wantErr: true},
		{path: "metadata.name['x']", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := ExtractFieldPathAsString(pod, tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestExtractContainerResourceValue(t *testing.T) {
	c := &v1.Container{Name: "c", Resources: v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1500m"), v1.ResourceMemory: resource.MustParse("128Mi")},
	}}
	tests := []struct {
		name, res, divisor, want string
		wantErr                  bool
	}{
		{name: "cpu request rounds up to whole cores", res: "requests.cpu", want: "1"},
		{name: "cpu request in millicores", res: "requests.cpu", divisor: "1m", want: "250"},
		{name: "cpu limit rounds up", res: "limits.cpu", want: "2"},
		{name: "memory limit in bytes", res: "limits.memory", want: "134217728"},
		{name: "memory request in Mi", res: "requests.memory", divisor: "1Mi", want: "64"},
		{name: "unset ephemeral-storage is 0", res: "limits.ephemeral-storage", want: "0"},
		{name: "unknown resource", res: "limits.gpu", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &v1.ResourceFieldSelector{Resource: tt.res}
			if tt.divisor != "" {
				fs.Divisor = resource.MustParse(tt.divisor)
			}
			got, err := ExtractContainerResourceValue(fs, c)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDefaultPodLimitsFillsOnlyMissingLimits(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
		Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")},
	}}}}}
	alloc := v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi")}
	got := DefaultPodLimits(pod, alloc)
	limits := got.Spec.Containers[0].Resources.Limits
	if q := limits[v1.ResourceCPU]; q.String() != "500m" {
		t.Errorf("cpu limit = %s, want the container's own 500m", q.String())
	}
	if q := limits[v1.ResourceMemory]; q.String() != "8Gi" {
		t.Errorf("memory limit = %s, want allocatable 8Gi", q.String())
	}
	if _, ok := pod.Spec.Containers[0].Resources.Limits[v1.ResourceMemory]; ok {
		t.Error("DefaultPodLimits changed its input")
	}
}
