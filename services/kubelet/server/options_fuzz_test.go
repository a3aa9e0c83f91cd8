package server

import (
	"net/http/httptest"
	"net/url"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// FuzzLogOptions feeds arbitrary /containerLogs query strings (what the apiserver and
// exec-proxy pass on from kubectl logs) to the kubelet's parser. Properties: a 400
// BadRequest Status or options within their ranges: tailLines -1 (all) or more,
// limitBytes 0 (no limit) or more.
func FuzzLogOptions(f *testing.F) {
	f.Add("follow=true&tailLines=10&timestamps=1")
	f.Add("sinceSeconds=60&limitBytes=4096&previous=false")
	f.Add("sinceTime=2026-01-02T03:04:05Z&tailLines=-5")
	f.Add("follow=maybe&sinceTime=yesterday&limitBytes=99999999999999999999")
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/containerLogs/ns/pod/c", nil)
		r.URL.RawQuery = query
		o, err := parseLogOptions(r)
		if err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("%q: error is not a 400 Status: %v", query, err)
			}
			return
		}
		if o.tailLines < -1 || o.limitBytes < 0 {
			t.Fatalf("%q: out-of-range options %+v", query, o)
		}
	})
}

// FuzzStreamOptions: exec and attach read their stream flags from any query; a
// terminal never has a separate stderr.
func FuzzStreamOptions(f *testing.F) {
	f.Add("command=ls&input=1&output=1&error=1&tty=1")
	f.Add("error=true&tty=false")
	f.Add("%zz&tty=TRUE")
	f.Fuzz(func(t *testing.T, query string) {
		q, _ := url.ParseQuery(query)
		if o := readStreamOptions(q); o.tty && o.stderr {
			t.Fatalf("%q: tty with a separate stderr", query)
		}
	})
}
