package natsauth_test

import (
	"crypto/x509"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/pki"
)

// issue returns a client certificate from ca for cn in orgs.
func issue(t *testing.T, ca *pki.CA, cn string, orgs ...string) *x509.Certificate {
	t.Helper()
	kp, err := ca.IssueClient(cn, orgs, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertPEM(kp.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestAuthorizeGrantsEachIdentityItsOwnSubjectsOnly(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cn      string
		orgs    []string
		pub     string // "" refuses
		sub     string
		refuses string
	}{
		{name: "a node publishes its own events and reads its own inbox", cn: "system:node:node-a.lan", orgs: []string{"system:nodes"},
			pub: "skiff.events.*.system:node:node-a_lan", sub: "_INBOX.system:node:node-a_lan.>"},
		{name: "the scheduler publishes its own events", cn: "system:kube-scheduler",
			pub: "skiff.events.*.system:kube-scheduler", sub: "_INBOX.system:kube-scheduler.>"},
		{name: "csr-signer publishes its own events", cn: "system:skiff:csr-signer",
			pub: "skiff.events.*.system:skiff:csr-signer", sub: "_INBOX.system:skiff:csr-signer.>"},
		{name: "an admin is refused", cn: "admin", orgs: []string{"system:masters"}, refuses: "has no NATS permissions"},
		{name: "a node that is also a master is refused", cn: "system:node:node-a", orgs: []string{"system:nodes", "system:masters"},
			refuses: "must be in exactly the system:nodes group"},
		{name: "a node name outside system:nodes is refused", cn: "system:node:node-a", refuses: "must be in exactly the system:nodes group"},
		{name: "a node name that is no DNS subdomain is refused", cn: "system:node:Node_A", orgs: []string{"system:nodes"}, refuses: "node name"},
		{name: "an empty node name is refused", cn: "system:node:", orgs: []string{"system:nodes"}, refuses: "node name"},
		{name: "a name with an underscore is refused", cn: "system:skiff:my_tool", refuses: "no NATS subject token"},
		{name: "a name with a wildcard is refused", cn: "*", refuses: "no NATS subject token"},
		{name: "the apiserver's name is not granted through the callout", cn: pki.APIServerNATSClient.CommonName, refuses: "not granted through the callout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := natsauth.Authorize(issue(t, ca, tc.cn, tc.orgs...))
			if tc.refuses != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refuses) {
					t.Fatalf("Authorize = %+v, %v; want refused saying %q", g, err, tc.refuses)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g.User != tc.cn || !slices.Equal(g.Publish, []string{tc.pub}) || !slices.Equal(g.Subscribe, []string{tc.sub}) {
				t.Fatalf("Authorize = %+v; want user %q publishing %q, subscribing %q", g, tc.cn, tc.pub, tc.sub)
			}
		})
	}
}

func TestRespondRefusesWhatIsNotAServerRequest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	kp, err := pki.LoadNATSAuthCalloutKey(filepath.Join(dir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	r := &natsauth.Responder{Issuer: kp, ClientCAs: x509.NewCertPool()}
	for _, request := range []string{"", "not a jwt", "eyJ0eXAiOiJKV1QifQ.e30.x"} {
		if answer, err := r.Respond([]byte(request)); err == nil {
			t.Errorf("Respond(%q) = %q; want an error", request, answer)
		}
	}
}
