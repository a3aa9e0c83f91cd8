package admission_test

import (
	"context"
	"net/http"
	"reflect"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/warning"

	"skiff.dev/services/apiserver/admission"
)

// pluginFunc adapts a function to admission.Interface.
type pluginFunc func(ctx context.Context, a admission.Attributes) error

func (f pluginFunc) Admit(ctx context.Context, a admission.Attributes) error { return f(ctx, a) }

func TestChainRunsMutatingThenValidating(t *testing.T) {
	var trace []string
	record := func(name string) admission.Interface {
		return pluginFunc(func(_ context.Context, a admission.Attributes) error {
			trace = append(trace, name+":"+a.Object.(*corev1.ConfigMap).Labels["step"])
			return nil
		})
	}
	mutate := func(step string) admission.Interface {
		return pluginFunc(func(_ context.Context, a admission.Attributes) error {
			a.Object.(*corev1.ConfigMap).Labels["step"] = step
			return nil
		})
	}
	chain := admission.Chain{
		// Listed validating first: the phases, not the listing, decide the order.
		Validating: []admission.Interface{record("validate")},
		Mutating:   []admission.Interface{record("m0"), mutate("1"), record("m1"), mutate("2")},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"step": "0"}}}
	if err := chain.Admit(context.Background(), admission.Attributes{Operation: admission.Create, Object: cm}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"m0:0", "m1:1", "validate:2"}; !reflect.DeepEqual(trace, want) {
		t.Fatalf("trace = %v, want %v", trace, want)
	}
}

func TestChainStopsAtTheFirstRejection(t *testing.T) {
	validated := false
	chain := admission.Chain{
		Mutating: []admission.Interface{pluginFunc(func(context.Context, admission.Attributes) error {
			return apierrors.NewForbidden(corev1.Resource("pods"), "p", nil)
		})},
		Validating: []admission.Interface{pluginFunc(func(context.Context, admission.Attributes) error { validated = true; return nil })},
	}
	if err := chain.Admit(context.Background(), admission.Attributes{Operation: admission.Create}); !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v, want the mutating plugin's 403", err)
	}
	if validated {
		t.Fatal("the validating phase ran after a mutating rejection")
	}
}

func TestChainDeleteHidesOldObjectFromMutatingPlugins(t *testing.T) {
	old := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	var mutatingSaw, validatingSaw any
	chain := admission.Chain{
		Mutating:   []admission.Interface{pluginFunc(func(_ context.Context, a admission.Attributes) error { mutatingSaw = a.OldObject; return nil })},
		Validating: []admission.Interface{pluginFunc(func(_ context.Context, a admission.Attributes) error { validatingSaw = a.OldObject; return nil })},
	}
	if err := chain.Admit(context.Background(), admission.Attributes{Operation: admission.Delete, OldObject: old}); err != nil {
		t.Fatal(err)
	}
	if mutatingSaw != nil || validatingSaw != old {
		t.Fatalf("mutating saw %v, validating saw %v; want nil and the old object", mutatingSaw, validatingSaw)
	}
}

func TestChainReinvokesTheMutatingPhaseOnceWhenAsked(t *testing.T) {
	var rounds []bool
	chain := admission.Chain{Mutating: []admission.Interface{pluginFunc(func(_ context.Context, a admission.Attributes) error {
		rounds = append(rounds, a.Reinvocation.IsReinvoke())
		a.Reinvocation.SetShouldReinvoke() // asks every round: only one more is run
		return nil
	})}}
	if err := chain.Admit(context.Background(), admission.Attributes{Operation: admission.Create}); err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, true}; !reflect.DeepEqual(rounds, want) {
		t.Fatalf("rounds (IsReinvoke) = %v, want %v", rounds, want)
	}
	rounds = nil
	quiet := admission.Chain{Mutating: []admission.Interface{pluginFunc(func(_ context.Context, a admission.Attributes) error {
		rounds = append(rounds, a.Reinvocation.IsReinvoke())
		return nil
	})}}
	if err := quiet.Admit(context.Background(), admission.Attributes{Operation: admission.Create}); err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 1 {
		t.Fatalf("the mutating phase ran %d times unasked, want 1", len(rounds))
	}
}

func TestWarningHeadersAreDedupedAndSafeConcurrently(t *testing.T) {
	h := http.Header{}
	ctx := admission.WithWarningHeaders(context.Background(), h)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			warning.AddWarning(ctx, "", `the "x" label is deprecated`)
			warning.AddWarning(ctx, "", "")
		}()
	}
	wg.Wait()
	warning.AddWarning(ctx, "", "second")
	want := []string{`299 - "the \"x\" label is deprecated"`, `299 - "second"`}
	if got := h.Values("Warning"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Warning headers = %q, want %q", got, want)
	}
}
