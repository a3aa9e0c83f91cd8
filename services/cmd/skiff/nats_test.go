package main

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/pki"
)

// TestNATSConfigIsWhatNATSServerLoads renders `skiff nats-config` and loads it with
// nats-server's own parser: the listen address, store, mutual TLS with the user mapped
// from the certificate, the apiserver's user and the auth callout trusting the PKI's key.
func TestNATSConfigIsWhatNATSServerLoads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	var out bytes.Buffer
	if code := natsConfigMain([]string{"--pki-dir", dir, "--store-dir", store, "--listen", "127.0.0.1:4333"}, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses it: %v\n%s", err, out.String())
	}
	issuer, err := pki.NATSAuthCalloutIssuer(filepath.Join(dir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case opts.Host != "127.0.0.1" || opts.Port != 4333:
		t.Errorf("listens on %s:%d", opts.Host, opts.Port)
	case !opts.JetStream || opts.StoreDir != store:
		t.Errorf("JetStream %v in %q", opts.JetStream, opts.StoreDir)
	case opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert || !opts.TLSMap:
		t.Errorf("TLS %+v, map %v; want verified client certificates mapped to users", opts.TLSConfig, opts.TLSMap)
	case opts.HTTPPort != 0:
		t.Errorf("monitoring on port %d", opts.HTTPPort)
	case len(opts.Users) != 1 || opts.Users[0].Username != natsauth.APIServerUser || opts.Users[0].Permissions != nil:
		t.Errorf("users %+v; want only %s, unrestricted", opts.Users, natsauth.APIServerUser)
	case opts.AuthCallout == nil || opts.AuthCallout.Issuer != issuer || opts.AuthCallout.Account != natsauth.Account ||
		len(opts.AuthCallout.AuthUsers) != 1 || opts.AuthCallout.AuthUsers[0] != natsauth.APIServerUser:
		t.Errorf("auth callout %+v; want issuer %s in %s, %s exempt", opts.AuthCallout, issuer, natsauth.Account, natsauth.APIServerUser)
	}
}

// TestNATSConfigNamesTheContainersFilesOnly: with --cert-dir the file names the key pair
// and CA there, and nothing of the PKI directory, whose secrets nats-server never needs.
func TestNATSConfigNamesTheContainersFilesOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	if _, err := pki.Init(pki.InitOptions{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := natsConfigMain([]string{"--pki-dir", dir, "--cert-dir", "/etc/nats"}, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	text := out.String()
	for _, want := range []string{`"/etc/nats/nats-server.crt"`, `"/etc/nats/nats-server.key"`, `"/etc/nats/ca.crt"`, `store_dir: "/data"`, `port: 4222`} {
		if !strings.Contains(text, want) {
			t.Errorf("configuration lacks %s:\n%s", want, text)
		}
	}
	seed, err := os.ReadFile(filepath.Join(dir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, dir) || strings.Contains(text, strings.TrimSpace(string(seed))) {
		t.Errorf("configuration names the PKI directory or the callout's seed:\n%s", text)
	}
}

func TestNATSConfigRefusesBadInput(t *testing.T) {
	empty := t.TempDir() // no nats-auth-callout.nk
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"a listen address without a port", []string{"--pki-dir", empty, "--listen", "0.0.0.0"}, 2},
		{"an argument", []string{"--pki-dir", empty, "extra"}, 2},
		{"a PKI directory without the callout's key", []string{"--pki-dir", empty}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := natsConfigMain(tc.args, &out); code != tc.code || out.Len() != 0 {
				t.Fatalf("exit %d with %d bytes out; want %d and nothing", code, out.Len(), tc.code)
			}
		})
	}
}
