package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"skiff.dev/services/internal/pki"
)

// pkiMain runs `skiff pki init`: it creates what is missing of a PKI directory (the CA,
// serving and client certificates, kubeconfigs, a bootstrap token) and keeps what exists.
func pkiMain(args []string) int {
	if len(args) == 0 || args[0] != "init" {
		fmt.Fprintln(os.Stderr, "usage: skiff pki init --dir DIR [--apiserver-url URL] [--apiserver-san NAME]... [--token-ttl DURATION (24h)]")
		return 2
	}
	fs := flag.NewFlagSet("skiff pki init", flag.ContinueOnError)
	var opts pki.InitOptions
	var sans stringList
	fs.StringVar(&opts.Dir, "dir", "./skiff-data/pki", "PKI directory; files that exist are kept")
	fs.StringVar(&opts.APIServerURL, "apiserver-url", "https://127.0.0.1:6443", "apiserver URL written into the kubeconfigs")
	fs.Var(&sans, "apiserver-san", "extra DNS name or IP for the apiserver certificate (repeatable)")
	fs.DurationVar(&opts.TokenTTL, "token-ttl", pki.DefaultBootstrapTokenTTL, "lifetime of the bootstrap token made when the directory holds none still valid (0 = never expires)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	opts.APIServerHosts = sans
	written, err := pki.Init(opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff pki init: %v\n", err)
		return 1
	}
	if len(written) == 0 {
		fmt.Printf("%s: complete, nothing to write\n", opts.Dir)
	}
	for _, name := range written {
		fmt.Printf("wrote %s/%s\n", strings.TrimRight(opts.Dir, "/"), name)
	}
	// Init left a valid token in place: this reads it back, writing nothing.
	tok, err := pki.EnsureBootstrapToken(filepath.Join(opts.Dir, pki.BootstrapTokenFile), opts.TokenTTL, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff pki init: %v\n", err)
		return 1
	}
	fmt.Printf("bootstrap token %s (in %s): %s\n", tok.ID, pki.BootstrapKubeconfigFile, describeExpiry(tok))
	return 0
}

// describeExpiry says when tok stops working and what to do after.
func describeExpiry(tok pki.BootstrapToken) string {
	if tok.Expiration.IsZero() {
		return "never expires; delete its line from " + pki.BootstrapTokenFile + " to revoke it"
	}
	return fmt.Sprintf("expires %s (in %s); `skiff token create` makes another",
		tok.Expiration.UTC().Format(time.RFC3339), time.Until(tok.Expiration).Round(time.Minute))
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
