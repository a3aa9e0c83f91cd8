package secret

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestValidateSecretTypes: each type refuses a secret without what it requires, with
// kube's field paths, and takes one that has it.
func TestValidateSecretTypes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		typ         corev1.SecretType
		data        map[string][]byte
		annotations map[string]string
		want        string // "" means valid
	}{
		{"opaque empty", corev1.SecretTypeOpaque, nil, nil, ""},
		{"custom type", "example.com/thing", nil, nil, ""},
		{"tls without key", corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("c")}, nil, `data[tls.key]: Required value`},
		{"tls without both", corev1.SecretTypeTLS, nil, nil, `[data[tls.crt]: Required value, data[tls.key]: Required value]`},
		{"tls", corev1.SecretTypeTLS, map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}, nil, ""},
		{"dockerconfigjson missing", corev1.SecretTypeDockerConfigJson, nil, nil, `data[.dockerconfigjson]: Required value`},
		{"dockerconfigjson not JSON", corev1.SecretTypeDockerConfigJson, map[string][]byte{".dockerconfigjson": []byte("{")}, nil,
			`data[.dockerconfigjson]: Invalid value: "<secret contents redacted>": unexpected end of JSON input`},
		{"dockerconfigjson", corev1.SecretTypeDockerConfigJson, map[string][]byte{".dockerconfigjson": []byte(`{"auths":{}}`)}, nil, ""},
		{"dockercfg missing", corev1.SecretTypeDockercfg, nil, nil, `data[.dockercfg]: Required value`},
		{"basic-auth empty", corev1.SecretTypeBasicAuth, nil, nil, `[data[username]: Required value, data[password]: Required value]`},
		{"basic-auth password only", corev1.SecretTypeBasicAuth, map[string][]byte{"password": nil}, nil, ""},
		{"ssh-auth empty key", corev1.SecretTypeSSHAuth, map[string][]byte{"ssh-privatekey": nil}, nil, `data[ssh-privatekey]: Required value`},
		{"service-account-token without name", corev1.SecretTypeServiceAccountToken, nil, nil,
			`metadata.annotations[kubernetes.io/service-account.name]: Required value`},
		{"service-account-token", corev1.SecretTypeServiceAccountToken, nil, map[string]string{corev1.ServiceAccountNameKey: "default"}, ""},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Annotations: tc.annotations}, Type: tc.typ, Data: tc.data}
		errs := Strategy{}.Validate(context.Background(), s)
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%s: %v, want valid", tc.name, errs.ToAggregate())
		case tc.want != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, errs.ToAggregate(), tc.want)
		}
	}
}
