package eventrecorder

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestEventNameIsAlwaysADNSSubdomain(t *testing.T) {
	now := time.Unix(0, 0x18eaac6888e704ca)
	cases := map[string]string{
		"nginx": "nginx.18eaac6888e704ca",
		"node-csr-S3bja20Vd3XNkkBjt8yr8TIaQL_jTscdklJXhFYi8bw": "node-csr-s3bja20vd3xnkkbjt8yr8tiaql-jtscdkljxhfyi8bw.18eaac6888e704ca",
		"_Weird_":                "weird.18eaac6888e704ca",
		"___":                    "event.18eaac6888e704ca",
		strings.Repeat("a", 300): strings.Repeat("a", validation.DNS1123SubdomainMaxLength-len(".18eaac6888e704ca")) + ".18eaac6888e704ca",
	}
	for object, want := range cases {
		got := eventName(object, now)
		if got != want {
			t.Errorf("eventName(%q) = %q, want %q", object, got, want)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("eventName(%q) = %q is not a DNS subdomain: %v", object, got, errs)
		}
	}
}
