package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"skiff.dev/services/internal/pki"
)

const tokenUsage = `usage:
  skiff token create [--kubeconfig PATH] [--ttl 24h] [--description TEXT] [--usages signing,authentication]
                     [--groups system:bootstrappers:kubeadm:default-node-token] [--bootstrap-kubeconfig PATH [--server URL]] [TOKEN]
  skiff token list [--kubeconfig PATH]
  skiff token delete [--kubeconfig PATH] TOKEN-ID|TOKEN...`

// Defaults of kubeadm token create (cmd/kubeadm/app/constants).
var (
	defaultTokenUsages = []string{"signing", "authentication"}
	defaultTokenGroups = []string{"system:bootstrappers:kubeadm:default-node-token"}
	// knownTokenUsages are the usages a token may have (cluster-bootstrap's KnownTokenUsages).
	knownTokenUsages = []string{"signing", "authentication"}
	// bootstrapGroupPattern is what an extra group must look like (cluster-bootstrap's
	// BootstrapGroupPattern).
	bootstrapGroupPattern = regexp.MustCompile(`^system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]$`)
	// tokenIDPattern is a token id alone (cluster-bootstrap's BootstrapTokenIDPattern).
	tokenIDPattern = regexp.MustCompile(`^[a-z0-9]{6}$`)
)

// tokenMain runs `skiff token create|list|delete`, kubeadm token's commands: they
// create, list and delete bootstrap token Secrets (kube-system/bootstrap-token-<id>),
// which the apiserver authenticates, through the API as the user of --kubeconfig.
// Mirrors cmd/kubeadm/app/cmd/token.go. It returns the exit code: 0, 1 on failure, 2 on
// a usage error.
func tokenMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, tokenUsage)
		return 2
	}
	fs := flag.NewFlagSet("skiff token "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of a user who may manage Secrets in kube-system, e.g. the admin's (default: $KUBECONFIG, else ~/.kube/config)")
	var run func(context.Context, kubernetes.Interface, *rest.Config) error
	switch args[0] {
	case "create":
		ttl := fs.Duration("ttl", pki.DefaultBootstrapTokenTTL, "lifetime of the token, after which it is deleted (0 = never expires)")
		description := fs.String("description", "", "a human-friendly description of the token's use")
		usages := fs.String("usages", strings.Join(defaultTokenUsages, ","), "what the token may be used for: "+strings.Join(knownTokenUsages, ", "))
		groups := fs.String("groups", strings.Join(defaultTokenGroups, ","), "extra groups the token authenticates in (with usage authentication), each system:bootstrappers:...")
		bootstrapKubeconfig := fs.String("bootstrap-kubeconfig", "", "also write a kubelet bootstrap kubeconfig here: --kubeconfig's CA and this token")
		server := fs.String("server", "", "the apiserver URL written into --bootstrap-kubeconfig (default: --kubeconfig's)")
		run = func(ctx context.Context, client kubernetes.Interface, cfg *rest.Config) error {
			if fs.NArg() > 1 {
				return usageError("create takes at most one token")
			}
			tok, err := newToken(fs.Arg(0), *ttl)
			if err != nil {
				return err
			}
			secret, err := tokenSecret(tok, *description, splitList(*usages), splitList(*groups))
			if err != nil {
				return err
			}
			if _, err := client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("a token with id %q already exists", tok.ID)
				}
				return fmt.Errorf("create bootstrap token: %w", err)
			}
			if *bootstrapKubeconfig != "" {
				if err := writeTokenKubeconfig(*bootstrapKubeconfig, *server, cfg, tok); err != nil {
					return err
				}
			}
			fmt.Fprintln(stdout, tok.String())
			return nil
		}
	case "list":
		run = func(ctx context.Context, client kubernetes.Interface, _ *rest.Config) error {
			if fs.NArg() > 0 {
				return usageError("list takes no arguments")
			}
			return listTokens(ctx, client, stdout, stderr)
		}
	case "delete":
		run = func(ctx context.Context, client kubernetes.Interface, _ *rest.Config) error {
			if fs.NArg() == 0 {
				return usageError("delete needs a token id or token")
			}
			for _, arg := range fs.Args() {
				id := arg
				if tokenID, _, ok := pki.ParseBootstrapToken(arg); ok {
					id = tokenID
				} else if !tokenIDPattern.MatchString(arg) {
					return fmt.Errorf("given token or token id %q did not match pattern %q or %q", arg, tokenIDPattern, `^([a-z0-9]{6})\.([a-z0-9]{16})$`)
				}
				if err := client.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, pki.BootstrapTokenSecretName(id), metav1.DeleteOptions{}); err != nil {
					return fmt.Errorf("failed to delete bootstrap token %q: %w", id, err)
				}
				fmt.Fprintf(stdout, "bootstrap token %q deleted\n", id)
			}
			return nil
		}
	default:
		fmt.Fprintln(stderr, tokenUsage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "skiff token %s: kubeconfig: %v\n", args[0], err)
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "skiff token %s: %v\n", args[0], err)
		return 1
	}
	if err := run(context.Background(), client, cfg); err != nil {
		fmt.Fprintf(stderr, "skiff token %s: %v\n", args[0], err)
		var usage usageError
		if errors.As(err, &usage) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError is a command line that asks for something impossible.
type usageError string

func (e usageError) Error() string { return string(e) }

// newToken is token ("" makes a random one) expiring ttl from now (0: never).
func newToken(token string, ttl time.Duration) (pki.BootstrapToken, error) {
	if ttl < 0 {
		return pki.BootstrapToken{}, fmt.Errorf("--ttl %v is negative", ttl)
	}
	if token == "" {
		return pki.NewBootstrapToken(ttl)
	}
	id, secret, ok := pki.ParseBootstrapToken(token)
	if !ok {
		return pki.BootstrapToken{}, fmt.Errorf("the bootstrap token %q was not of the form %q", token, `^([a-z0-9]{6})\.([a-z0-9]{16})$`)
	}
	tok := pki.BootstrapToken{ID: id, Secret: secret}
	if ttl > 0 {
		tok.Expiration = time.Now().Add(ttl).UTC().Truncate(time.Second)
	}
	return tok, nil
}

// tokenSecret is tok's Secret after kubeadm's checks of usages and groups.
func tokenSecret(tok pki.BootstrapToken, description string, usages, groups []string) (*corev1.Secret, error) {
	for _, u := range usages {
		if !slices.Contains(knownTokenUsages, u) {
			return nil, fmt.Errorf("invalid bootstrap token usage string: %s, valid usage options: %s", u, strings.Join(knownTokenUsages, ","))
		}
	}
	for _, g := range groups {
		if !bootstrapGroupPattern.MatchString(g) {
			return nil, fmt.Errorf("bootstrap group %q is invalid (must match %s)", g, bootstrapGroupPattern)
		}
	}
	if len(groups) > 0 && !slices.Contains(usages, "authentication") {
		return nil, errors.New("--groups cannot be specified unless --usages includes \"authentication\"")
	}
	return pki.BootstrapTokenSecret(tok, description, usages, groups), nil
}

// writeTokenKubeconfig writes a kubelet bootstrap kubeconfig for server (cfg's when "")
// trusting cfg's CA, with tok as the user's token, atomically and readable by its owner
// only.
func writeTokenKubeconfig(path, server string, cfg *rest.Config, tok pki.BootstrapToken) error {
	caPEM := cfg.CAData
	if len(caPEM) == 0 && cfg.CAFile != "" {
		var err error
		if caPEM, err = os.ReadFile(cfg.CAFile); err != nil {
			return fmt.Errorf("the kubeconfig's CA: %w", err)
		}
	}
	if len(caPEM) == 0 {
		return errors.New("the kubeconfig names no certificate authority to put into the bootstrap kubeconfig")
	}
	if server == "" {
		server = cfg.Host
	}
	data, err := pki.Kubeconfig(server, caPEM, "kubelet-bootstrap", &clientcmdapi.AuthInfo{Token: tok.String()})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(path, data, 0o600); err != nil {
		return fmt.Errorf("write bootstrap kubeconfig: %w", err)
	}
	return nil
}

// listTokens prints kubeadm token list's table of the bootstrap token Secrets; a Secret
// that does not hold a token is reported on stderr and skipped.
func listTokens(ctx context.Context, client kubernetes.Interface, stdout, stderr io.Writer) error {
	secrets, err := client.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list bootstrap tokens: %w", err)
	}
	w := tabwriter.NewWriter(stdout, 10, 4, 3, ' ', 0)
	fmt.Fprintln(w, "TOKEN\tTTL\tEXPIRES\tUSAGES\tDESCRIPTION\tEXTRA GROUPS")
	for i := range secrets.Items {
		s := &secrets.Items[i]
		if s.Type != pki.SecretTypeBootstrapToken {
			continue
		}
		id, secret := string(s.Data[pki.BootstrapTokenIDKey]), string(s.Data[pki.BootstrapTokenSecretKey])
		if _, _, ok := pki.ParseBootstrapToken(id + "." + secret); !ok || s.Name != pki.BootstrapTokenSecretName(id) {
			fmt.Fprintf(stderr, "[token] secret %s does not hold a valid bootstrap token, skipping\n", s.Name)
			continue
		}
		ttl, expires := "<forever>", "<never>"
		if exp := string(s.Data[pki.BootstrapTokenExpirationKey]); exp != "" {
			t, err := time.Parse(time.RFC3339, exp)
			if err != nil {
				fmt.Fprintf(stderr, "[token] secret %s has an expiration that does not parse, skipping\n", s.Name)
				continue
			}
			ttl, expires = duration.ShortHumanDuration(time.Until(t)), t.Format(time.RFC3339)
		}
		var usages []string
		for k, v := range s.Data {
			if u, ok := strings.CutPrefix(k, pki.BootstrapTokenUsagePrefix); ok && string(v) == "true" {
				usages = append(usages, u)
			}
		}
		sort.Strings(usages)
		fmt.Fprintf(w, "%s.%s\t%s\t%s\t%s\t%s\t%s\n", id, secret, ttl, expires, orNone(strings.Join(usages, ",")),
			orNone(string(s.Data[pki.BootstrapTokenDescriptionKey])), orNone(string(s.Data[pki.BootstrapTokenExtraGroupsKey])))
	}
	return w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
