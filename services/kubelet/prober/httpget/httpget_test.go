package httpget

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestUserAgent(t *testing.T) {
	if got := UserAgent("kube-probe", "v1.32.4"); got != "kube-probe/1.32" {
		t.Errorf("UserAgent = %q", got)
	}
}

func TestNewRequest(t *testing.T) {
	c := &v1.Container{Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 8080}}}
	for _, tc := range []struct {
		name    string
		action  v1.HTTPGetAction
		wantURL string
		wantErr bool
	}{
		{name: "defaults to http on the pod IP", action: v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(80)}, wantURL: "http://10.0.0.5:80/healthz"},
		{name: "named port and https", action: v1.HTTPGetAction{Scheme: v1.URISchemeHTTPS, Port: intstr.FromString("web")}, wantURL: "https://10.0.0.5:8080"},
		{name: "host and query kept", action: v1.HTTPGetAction{Host: "127.0.0.1", Path: "/x?y=1", Port: intstr.FromInt32(9)}, wantURL: "http://127.0.0.1:9/x?y=1"},
		{name: "unknown port name", action: v1.HTTPGetAction{Port: intstr.FromString("nope")}, wantErr: true},
		{name: "port out of range", action: v1.HTTPGetAction{Port: intstr.FromInt32(70000)}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := NewRequest(context.Background(), &tc.action, c, "10.0.0.5", "kube-probe/1.32")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v", err)
			}
			if err != nil {
				return
			}
			if req.URL.String() != tc.wantURL || req.Header.Get("User-Agent") != "kube-probe/1.32" || req.Header.Get("Accept") != "*/*" {
				t.Errorf("url %s headers %v", req.URL, req.Header)
			}
		})
	}
}
