package admission

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

func TestDefaultTolerationSeconds(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	notReady := corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	unreachable := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}
	own := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)}
	noSchedule := corev1.Toleration{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	everything := corev1.Toleration{Operator: corev1.TolerationOpExists}
	for _, tc := range []struct {
		name        string
		attrs       func(pod *corev1.Pod) Attributes
		tolerations []corev1.Toleration
		want        []corev1.Toleration
	}{
		{"a pod without tolerations gets both for 300 s", podCreateAttrs(pods), nil, []corev1.Toleration{notReady, unreachable}},
		{"a pod's own unreachable toleration is kept", podCreateAttrs(pods), []corev1.Toleration{own}, []corev1.Toleration{own, notReady}},
		{"a NoSchedule toleration does not count", podCreateAttrs(pods), []corev1.Toleration{noSchedule}, []corev1.Toleration{noSchedule, notReady, unreachable}},
		{"tolerating every taint needs nothing more", podCreateAttrs(pods), []corev1.Toleration{everything}, []corev1.Toleration{everything}},
		{"updates are defaulted too", func(pod *corev1.Pod) Attributes {
			return Attributes{Operation: Update, Resource: pods, Namespace: "default", Name: "p", Object: pod}
		}, nil, []corev1.Toleration{notReady, unreachable}},
		{"subresources are left alone", func(pod *corev1.Pod) Attributes {
			return Attributes{Operation: Update, Resource: pods, Subresource: "status", Namespace: "default", Name: "p", Object: pod}
		}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: tc.tolerations}}
			if err := (DefaultTolerationSecondsPlugin{}).Admit(context.Background(), tc.attrs(pod)); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(pod.Spec.Tolerations, tc.want) {
				t.Errorf("tolerations = %+v, want %+v", pod.Spec.Tolerations, tc.want)
			}
		})
	}
}

func TestDefaultTolerationSecondsConfigured(t *testing.T) {
	pod := &corev1.Pod{}
	p := DefaultTolerationSecondsPlugin{NotReadySeconds: 10, UnreachableSeconds: 20}
	if err := p.Admit(context.Background(), podCreateAttrs(schema.GroupVersionResource{Version: "v1", Resource: "pods"})(pod)); err != nil {
		t.Fatal(err)
	}
	if got := []int64{*pod.Spec.Tolerations[0].TolerationSeconds, *pod.Spec.Tolerations[1].TolerationSeconds}; got[0] != 10 || got[1] != 20 {
		t.Errorf("tolerationSeconds = %v, want [10 20]", got)
	}
}

func TestDefaultTolerationSecondsIgnoresOtherResources(t *testing.T) {
	a := Attributes{Operation: Create, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Object: &corev1.ConfigMap{}}
	if err := (DefaultTolerationSecondsPlugin{}).Admit(context.Background(), a); err != nil {
		t.Errorf("Admit(configmap) = %v, want nil", err)
	}
}

func podCreateAttrs(gvr schema.GroupVersionResource) func(pod *corev1.Pod) Attributes {
	return func(pod *corev1.Pod) Attributes {
		return Attributes{Operation: Create, Resource: gvr, Namespace: "default", Name: "p", Object: pod}
	}
}
