package runtimeclass

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func valid() *nodev1.RuntimeClass {
	return &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gvisor", ResourceVersion: "1"},
		Handler:    "runsc",
		Overhead: &nodev1.Overhead{PodFixed: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("1Mi"),
		}},
		Scheduling: &nodev1.Scheduling{
			NodeSelector: map[string]string{"sandbox": "gvisor"},
			Tolerations:  []corev1.Toleration{{Key: "sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

func TestValidateRuntimeClass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*nodev1.RuntimeClass)
		want   string // a substring of the one error expected; "" means valid
	}{
		{"a class with overhead and scheduling", func(*nodev1.RuntimeClass) {}, ""},
		{"a bare class, as the conformance suite makes", func(rc *nodev1.RuntimeClass) { rc.Overhead, rc.Scheduling = nil, nil }, ""},
		{"the handler is required", func(rc *nodev1.RuntimeClass) { rc.Handler = "" }, `handler: Invalid value: ""`},
		{"the handler is a DNS label", func(rc *nodev1.RuntimeClass) { rc.Handler = "run.sc" }, `handler: Invalid value: "run.sc": must not contain dots`},
		{"the name is a DNS subdomain", func(rc *nodev1.RuntimeClass) { rc.Name = "Not_A_Name" }, `metadata.name: Invalid value: "Not_A_Name"`},
		{"overhead is not negative", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed[corev1.ResourceCPU] = resource.MustParse("-1") },
			`overhead.limits[cpu]: Invalid value: "-1": must be greater than or equal to 0`},
		{"overhead names container resources", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed["pods"] = resource.MustParse("1") },
			`overhead.limits[pods]: Invalid value: "pods": must be a standard resource for containers`},
		{"an extended resource in overhead is whole", func(rc *nodev1.RuntimeClass) { rc.Overhead.PodFixed["example.com/gpu"] = resource.MustParse("500m") },
			`overhead.limits[example.com/gpu]: Invalid value: "500m": must be an integer`},
		{"hugepages in overhead need cpu or memory", func(rc *nodev1.RuntimeClass) {
			rc.Overhead.PodFixed = corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi")}
		}, "overhead: Forbidden: HugePages require cpu or memory"},
		{"nodeSelector keys are label names", func(rc *nodev1.RuntimeClass) { rc.Scheduling.NodeSelector = map[string]string{"bad key": "x"} },
			`scheduling.nodeSelector: Invalid value: "bad key"`},
		{"a toleration with tolerationSeconds must be NoExecute", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations[0].TolerationSeconds = ptr.To(int64(5)) },
			`scheduling.tolerations.tolerations[0].effect: Invalid value: "NoSchedule": effect must be 'NoExecute' when ` + "`tolerationSeconds`" + ` is set`},
		{"an empty toleration key goes with Exists", func(rc *nodev1.RuntimeClass) {
			rc.Scheduling.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "x"}}
		}, `scheduling.tolerations.tolerations[0].operator: Invalid value: "Equal": operator must be Exists when ` + "`key`" + ` is empty`},
		{"an Exists toleration has no value", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations[0].Value = "x" },
			`scheduling.tolerations.tolerations[0].operator: Invalid value: "x": value must be empty when ` + "`operator`" + ` is 'Exists'`},
		{"a toleration's effect is a taint effect", func(rc *nodev1.RuntimeClass) { rc.Scheduling.Tolerations[0].Effect = "NoWay" },
			`scheduling.tolerations.tolerations[0].effect: Unsupported value: "NoWay"`},
		{"two tolerations alike are one too many", func(rc *nodev1.RuntimeClass) {
			rc.Scheduling.Tolerations = append(rc.Scheduling.Tolerations, rc.Scheduling.Tolerations[0])
		}, `scheduling.tolerations[1]: Duplicate value`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := valid()
			tc.change(rc)
			errs := Strategy{}.Validate(context.Background(), rc)
			switch {
			case tc.want == "" && len(errs) != 0:
				t.Errorf("want valid, got %v", errs.ToAggregate())
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("want one error containing %q, got %v", tc.want, errs.ToAggregate())
			}
		})
	}
}

func TestRuntimeClassUpdate(t *testing.T) {
	old := valid()
	t.Run("overhead, scheduling and labels may change", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Overhead, rc.Scheduling, rc.Labels = nil, nil, map[string]string{"a": "b"}
		if errs := (Strategy{}).ValidateUpdate(context.Background(), rc, old); len(errs) != 0 {
			t.Errorf("got %v", errs.ToAggregate())
		}
	})
	t.Run("the handler is immutable", func(t *testing.T) {
		rc := old.DeepCopy()
		rc.Handler = "runc"
		errs := Strategy{}.ValidateUpdate(context.Background(), rc, old)
		if len(errs) != 1 || errs[0].Error() != `handler: Invalid value: "runc": field is immutable` {
			t.Errorf("got %v", errs.ToAggregate())
		}
	})
	t.Run("an update must name its resourceVersion", func(t *testing.T) {
		if (Strategy{}).AllowUnconditionalUpdate() {
			t.Error("unconditional updates allowed")
		}
	})
}

func TestRuntimeClassTable(t *testing.T) {
	s := Strategy{}
	var names []string
	for _, c := range s.TableColumns() {
		names = append(names, strings.ToUpper(c.Name))
	}
	row := s.TableRow(valid())
	if strings.Join(names, " ") != "NAME HANDLER AGE" || row[0] != "gvisor" || row[1] != "runsc" {
		t.Errorf("columns %v row %v", names, row)
	}
	if _, f, _ := s.GetAttrs(valid()); len(f) != 1 || f["metadata.name"] != "gvisor" {
		t.Errorf("selectable fields %v", f)
	}
}
