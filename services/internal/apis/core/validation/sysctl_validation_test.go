package validation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidateSysctls(t *testing.T) {
	errs := validateSysctls([]corev1.Sysctl{
		{Name: "foo-", Value: "bar"}, {Name: "kernel.shmmax", Value: "1"}, {Name: "safe-and-unsafe", Value: "1"},
		{Name: "bar..", Value: "42"}, {Name: "net/ipv4/ip_forward", Value: "1"}, {Name: "kernel.shmmax", Value: "2"}, {Name: ""},
	}, field.NewPath("spec", "securityContext", "sysctls"))
	got := errs.ToAggregate().Error()
	for _, want := range []string{`spec.securityContext.sysctls[0].name: Invalid value: "foo-"`, `spec.securityContext.sysctls[3].name: Invalid value: "bar.."`,
		`spec.securityContext.sysctls[5].name: Duplicate value: "kernel.shmmax"`, `spec.securityContext.sysctls[6].name: Required value`} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q lack %q", got, want)
		}
	}
	if len(errs) != 4 {
		t.Errorf("%d errors, want 4: %v", len(errs), errs)
	}
}
