package apiservice

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"
)

func remote() *apiregistrationv1.APIService {
	return &apiregistrationv1.APIService{
		ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io"},
		Spec: apiregistrationv1.APIServiceSpec{
			Group: "metrics.k8s.io", Version: "v1beta1", GroupPriorityMinimum: 100, VersionPriority: 100,
			Service:  &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"},
			CABundle: []byte("-----BEGIN CERTIFICATE-----"),
		},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*apiregistrationv1.APIService)
		want   string // a substring of the one error expected; "" means valid
	}{
		{"remote", func(*apiregistrationv1.APIService) {}, ""},
		{"insecure", func(s *apiregistrationv1.APIService) { s.Spec.CABundle, s.Spec.InsecureSkipTLSVerify = nil, true }, ""},
		{"local", func(s *apiregistrationv1.APIService) { s.Spec.Service, s.Spec.CABundle = nil, nil }, ""},
		{"legacy group", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Group, s.Spec.Version = "v1.", "", "v1" }, ""},
		{"the name is version.group", func(s *apiregistrationv1.APIService) { s.Name = "metrics" },
			`metadata.name: Invalid value: "metrics": must be ` + "`spec.version+\".\"+spec.group`" + `: "v1beta1.metrics.k8s.io"`},
		{"only v1 may have no group", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Group = "v1beta1.", "" },
			"spec.group: Required value: only v1 may have an empty group and it better be legacy kube"},
		{"the group is a DNS subdomain", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Group = "v1beta1.Metrics", "Metrics" },
			`spec.group: Invalid value: "Metrics"`},
		{"the version is a DNS label", func(s *apiregistrationv1.APIService) { s.Name, s.Spec.Version = "V1.metrics.k8s.io", "V1" },
			`spec.version: Invalid value: "V1"`},
		{"groupPriorityMinimum is at least 1", func(s *apiregistrationv1.APIService) { s.Spec.GroupPriorityMinimum = 0 },
			"spec.groupPriorityMinimum: Invalid value: 0: must be positive and less than 20000"},
		{"groupPriorityMinimum is at most 20000", func(s *apiregistrationv1.APIService) { s.Spec.GroupPriorityMinimum = 20001 },
			"spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000"},
		{"versionPriority is at most 1000", func(s *apiregistrationv1.APIService) { s.Spec.VersionPriority = 1001 },
			"spec.versionPriority: Invalid value: 1001: must be positive and less than 1000"},
		{"a local APIService has no caBundle", func(s *apiregistrationv1.APIService) { s.Spec.Service = nil },
			`spec.caBundle: Invalid value: "27 bytes": local APIServices may not have a caBundle`},
		{"a local APIService verifies nothing", func(s *apiregistrationv1.APIService) {
			s.Spec.Service, s.Spec.CABundle, s.Spec.InsecureSkipTLSVerify = nil, nil, true
		}, "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify"},
		{"the Service has a namespace", func(s *apiregistrationv1.APIService) { s.Spec.Service.Namespace = "" },
			"spec.service.namespace: Required value"},
		{"the Service has a name", func(s *apiregistrationv1.APIService) { s.Spec.Service.Name = "" },
			"spec.service.name: Required value"},
		{"the port is a port", func(s *apiregistrationv1.APIService) { s.Spec.Service.Port = ptr.To[int32](65536) },
			"spec.service.port: Invalid value: 65536: port is not valid: must be between 1 and 65535, inclusive"},
		{"caBundle or insecureSkipTLSVerify", func(s *apiregistrationv1.APIService) { s.Spec.InsecureSkipTLSVerify = true },
			"spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := remote()
			tc.change(s)
			Strategy{}.PrepareForCreate(context.Background(), s)
			errs := Strategy{}.Validate(context.Background(), s)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Fatalf("Validate: %v, want none", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
				t.Fatalf("Validate: %v, want one error containing %q", errs, tc.want)
			}
		})
	}
}

func TestPrepareForCreate(t *testing.T) {
	s := remote()
	s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionTrue}}
	Strategy{}.PrepareForCreate(context.Background(), s)
	if s.Spec.Service.Port == nil || *s.Spec.Service.Port != 443 {
		t.Errorf("spec.service.port = %v, want the default 443", s.Spec.Service.Port)
	}
	if len(s.Status.Conditions) != 0 {
		t.Errorf("status = %+v, want it cleared", s.Status)
	}
	local := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.apps"},
		Spec: apiregistrationv1.APIServiceSpec{Group: "apps", Version: "v1", GroupPriorityMinimum: 17800, VersionPriority: 15}}
	Strategy{}.PrepareForCreate(context.Background(), local)
	if c := local.Status.Conditions; len(c) != 1 || c[0].Status != apiregistrationv1.ConditionTrue || c[0].Reason != "Local" {
		t.Errorf("local conditions = %+v, want Available True (Local)", c)
	}
	if row := (Strategy{}).TableRow(local); row[1] != "Local" || row[2] != "True" {
		t.Errorf("row = %v, want Local True", row)
	}
	s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: apiregistrationv1.ConditionFalse, Reason: "MissingEndpoints"}}
	if row := (Strategy{}).TableRow(s); row[1] != "kube-system/metrics-server" || row[2] != "False (MissingEndpoints)" {
		t.Errorf("row = %v, want kube-system/metrics-server False (MissingEndpoints)", row)
	}
}

func TestStatusUpdateKeepsSpec(t *testing.T) {
	old := remote()
	old.ResourceVersion = "1"
	Strategy{}.PrepareForCreate(context.Background(), old)
	s := old.DeepCopy()
	s.Spec.VersionPriority = 7
	s.Labels = map[string]string{"a": "b"}
	s.Status.Conditions = []apiregistrationv1.APIServiceCondition{{Type: apiregistrationv1.Available, Status: "Maybe"}}
	StatusStrategy{}.PrepareForUpdate(context.Background(), s, old)
	if s.Spec.VersionPriority != 100 || s.Labels != nil {
		t.Errorf("status update changed spec or labels: %+v %v", s.Spec, s.Labels)
	}
	errs := StatusStrategy{}.ValidateUpdate(context.Background(), s, old)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `status.conditions[0].status: Unsupported value: "Maybe"`) {
		t.Errorf("ValidateUpdate: %v, want the unsupported status", errs)
	}
}
