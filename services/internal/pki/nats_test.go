package pki_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"skiff.dev/services/internal/pki"
)

func TestInitWritesTheNATSAuthCalloutKeyOnce(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	written, err := pki.Init(pki.InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(written, pki.NATSAuthCalloutSeedFile) {
		t.Fatalf("Init wrote %v; want %s", written, pki.NATSAuthCalloutSeedFile)
	}
	path := filepath.Join(dir, pki.NATSAuthCalloutSeedFile)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", path, info.Mode().Perm())
	}
	issuer, err := pki.NATSAuthCalloutIssuer(path)
	if err != nil || !nkeys.IsValidPublicAccountKey(issuer) {
		t.Fatalf("issuer %q, %v; want a public account nkey", issuer, err)
	}
	written, err = pki.Init(pki.InitOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := pki.NATSAuthCalloutIssuer(path); err != nil || again != issuer || slices.Contains(written, pki.NATSAuthCalloutSeedFile) {
		t.Fatalf("second Init: issuer %q (was %q), wrote %v, %v; want the key kept", again, issuer, written, err)
	}
}

func TestLoadNATSAuthCalloutKeyTakesAccountSeedsOnly(t *testing.T) {
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	userSeed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"a user seed": userSeed, "not a seed": []byte("hello\n"), "empty": nil} {
		path := filepath.Join(t.TempDir(), "seed")
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := pki.LoadNATSAuthCalloutKey(path); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := pki.LoadNATSAuthCalloutKey(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file: loaded")
	}
}

func TestNATSUserIsTheCertificatesCommonName(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	fromPair, err := pki.ClientTLS(dir, pki.Scheduler.Name)
	if err != nil {
		t.Fatal(err)
	}
	fromFiles, err := pki.ClientTLSFromFiles(dir, pki.CSRSigner.Name, pki.ClusterCA, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    *tls.Config
		want string
	}{{fromPair, pki.Scheduler.CommonName}, {fromFiles, pki.CSRSigner.CommonName}} {
		if got, err := pki.NATSUser(tc.c); err != nil || got != tc.want {
			t.Errorf("NATSUser = %q, %v; want %q", got, err, tc.want)
		}
	}
	if got, err := pki.NATSUser(&tls.Config{}); err == nil || !strings.Contains(err.Error(), "no client certificate") {
		t.Errorf("NATSUser without a certificate = %q, %v; want an error", got, err)
	}
}
