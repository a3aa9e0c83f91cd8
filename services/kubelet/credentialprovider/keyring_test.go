package credentialprovider

import (
	"encoding/base64"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLookup(t *testing.T) {
	auth := func(u, p string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":" + p)) }
	secrets := []v1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "json"}, Type: v1.SecretTypeDockerConfigJson, Data: map[string][]byte{
			v1.DockerConfigJsonKey: []byte(`{"auths":{
				"registry.example.com":{"auth":"` + auth("ex", "pw") + `"},
				"registry.example.com/team":{"username":"team","password":"tpw"},
				"*.corp.test":{"username":"corp","password":"c"},
				"https://index.docker.io/v1/":{"username":"hub","password":"h"}}}`)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Type: v1.SecretTypeDockercfg, Data: map[string][]byte{
			v1.DockerConfigKey: []byte(`{"localhost:5000":{"username":"local","password":"l"}}`)}},
	}
	k, err := MakeKeyring(secrets)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		image string
		users []string
	}{
		{"registry.example.com/app:1", []string{"ex"}},
		{"registry.example.com/team/app:1", []string{"team", "ex"}},
		{"registry.example.com/teamwork/app", []string{"ex"}},
		{"eu.corp.test/x@sha256:abc", []string{"corp"}},
		{"nginx", []string{"hub"}},
		{"library/nginx:1.27", []string{"hub"}},
		{"docker.io/library/nginx", []string{"hub"}},
		{"localhost:5000/img:tag", []string{"local"}},
		{"other.example.org/app", nil},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			var users []string
			for _, a := range k.Lookup(tt.image) {
				users = append(users, a.Username)
			}
			if len(users) != len(tt.users) {
				t.Fatalf("users %v, want %v", users, tt.users)
			}
			for i := range users {
				if users[i] != tt.users[i] {
					t.Errorf("users %v, want %v", users, tt.users)
				}
			}
		})
	}
	if _, err := MakeKeyring([]v1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "opaque"}, Type: v1.SecretTypeOpaque}}); err == nil {
		t.Error("an Opaque secret was accepted as a pull secret")
	}
}
