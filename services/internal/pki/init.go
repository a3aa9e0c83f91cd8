package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Files in a PKI directory. Each identity's key pair is <name>.crt and <name>.key.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	// BootstrapTokenFile lists the bootstrap tokens the apiserver accepts (see
	// ReadBootstrapTokens for the format).
	BootstrapTokenFile = "bootstrap-tokens.csv"
	// AdminKubeconfigFile is the admin's kubeconfig (user admin in system:masters).
	AdminKubeconfigFile = "admin.kubeconfig"
	// BootstrapKubeconfigFile is what a new kubelet starts from: the CA and a bootstrap
	// token (kube's --bootstrap-kubeconfig).
	BootstrapKubeconfigFile = "bootstrap-kubelet.kubeconfig"
	// APIServerName is the apiserver serving key pair's name (apiserver.crt/.key).
	APIServerName = "apiserver"
	// ExecProxyServingName is exec-proxy's serving key pair (port 10443).
	ExecProxyServingName = "exec-proxy-serving"
	// EtcdServerName is etcd's serving key pair (port 2379); etcd verifies its clients
	// against the cluster CA.
	EtcdServerName = "etcd-server"
	// NATSServerName is NATS's serving key pair (port 4222); NATS verifies its clients
	// against the cluster CA.
	NATSServerName = "nats-server"
	// ServiceAccountKeyFile is the key the apiserver signs service-account tokens with
	// (kubeadm's sa.key, kube-apiserver's --service-account-signing-key-file).
	ServiceAccountKeyFile = "sa.key"
	// ServiceAccountPublicKeyFile is its public half (kubeadm's sa.pub,
	// --service-account-key-file), which verifies the tokens.
	ServiceAccountPublicKeyFile = "sa.pub"
)

// Identity is a client certificate Init issues: the apiserver sees CommonName as the user
// and Organizations as the groups.
type Identity struct {
	// Name is the file stem (<Name>.crt, <Name>.key, <Name>.kubeconfig).
	Name          string
	CommonName    string
	Organizations []string
}

// The identities of skiff's services (DESIGN.md "Identities"). Kubelets are not here:
// each earns its own through a CertificateSigningRequest.
var (
	Admin     = Identity{Name: "admin", CommonName: "admin", Organizations: []string{"system:masters"}}
	Scheduler = Identity{Name: "scheduler", CommonName: "system:kube-scheduler"}
	// ControllerManager is kube-controller-manager's identity.
	ControllerManager = Identity{Name: "controller-manager", CommonName: "system:kube-controller-manager"}
	CSRSigner         = Identity{Name: "csr-signer", CommonName: "system:skiff:csr-signer"}
	ExecProxy         = Identity{Name: "exec-proxy", CommonName: "system:skiff:exec-proxy"}
	// KubeProxy is the proxy's identity on every node, kube's system:kube-proxy user
	// (bound to the system:node-proxier ClusterRole), as kube-up gives each node's
	// kube-proxy one shared kubeconfig.
	KubeProxy = Identity{Name: "kube-proxy", CommonName: "system:kube-proxy"}
	// FrontProxyClient is the apiserver's identity toward exec-proxy: exec-proxy trusts
	// X-Remote-User/X-Remote-Group only from it (kube's --requestheader-allowed-names
	// default, front-proxy-client).
	FrontProxyClient = Identity{Name: "front-proxy-client", CommonName: "front-proxy-client"}
	// CoreDNS is cluster DNS's identity toward the apiserver (CoreDNS's kubernetes
	// plugin reads coredns.kubeconfig), bound to kubeadm's system:coredns ClusterRole.
	CoreDNS = Identity{Name: "coredns", CommonName: "system:coredns"}
)

// Identities are the client identities Init issues, each with a kubeconfig.
var Identities = []Identity{Admin, Scheduler, ControllerManager, CSRSigner, ExecProxy, KubeProxy, FrontProxyClient, CoreDNS}

// APIServerEtcdClient is the apiserver's identity toward etcd (kubeadm's
// apiserver-etcd-client); it has no kubeconfig, etcd is not the API.
var APIServerEtcdClient = Identity{Name: "apiserver-etcd-client", CommonName: "kube-apiserver-etcd-client"}

// APIServerNATSClient is the apiserver's identity toward NATS, where its event sink
// consumes the EVENTS stream.
var APIServerNATSClient = Identity{Name: "apiserver-nats-client", CommonName: "kube-apiserver-nats-client"}

// DefaultAPIServerHosts are the apiserver serving certificate's SANs besides those
// InitOptions adds: how it is reached locally, in compose (service name apiserver) and
// by Kubernetes' in-cluster names and the kubernetes Service's ClusterIP (the first
// address of the default --service-cluster-ip-range, 10.96.0.0/12).
var DefaultAPIServerHosts = []string{"localhost", "127.0.0.1", "::1", "apiserver", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local", "10.96.0.1"}

// DefaultExecProxyHosts are exec-proxy's serving certificate SANs.
var DefaultExecProxyHosts = []string{"localhost", "127.0.0.1", "::1", "exec-proxy"}

// DefaultEtcdHosts and DefaultNATSHosts are etcd's and NATS's serving certificate SANs:
// loopback for the all-in-one, the compose service name for the full stack.
var (
	DefaultEtcdHosts = []string{"localhost", "127.0.0.1", "::1", "etcd"}
	DefaultNATSHosts = []string{"localhost", "127.0.0.1", "::1", "nats"}
)

// InitOptions says what Init makes.
type InitOptions struct {
	// Dir is the PKI directory; created (0700) if missing.
	Dir string
	// APIServerURL is the server written into the kubeconfigs, e.g.
	// "https://127.0.0.1:6443" (the default).
	APIServerURL string
	// APIServerHosts are extra SANs (DNS names or IPs) for the apiserver certificate.
	APIServerHosts []string
	// TokenTTL is the bootstrap token's lifetime; 0 means it never expires.
	TokenTTL time.Duration
}

// Init creates what is missing in opts.Dir: the CA, the apiserver's and exec-proxy's
// serving certificates, a client certificate and kubeconfig for every Identity, a
// bootstrap token, the kubelet bootstrap kubeconfig and the service-account signing key
// (sa.key, sa.pub). Existing files are kept, never
// overwritten, so Init is idempotent and safe to run at every start. It returns the
// names of the files it wrote. Errors: an unwritable directory, an existing CA that does
// not load.
func Init(opts InitOptions) (written []string, err error) {
	if opts.Dir == "" {
		return nil, errors.New("pki: a directory is required")
	}
	if opts.APIServerURL == "" {
		opts.APIServerURL = "https://127.0.0.1:6443"
	}
	if u, err := url.Parse(opts.APIServerURL); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("pki: apiserver URL %q must be https://host[:port]", opts.APIServerURL)
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, err
	}
	dir := opts.Dir
	write := func(name string, data []byte, mode os.FileMode) error {
		if err := writeNew(join(dir, name), data, mode); err != nil {
			return err
		}
		written = append(written, name)
		return nil
	}

	var ca *CA
	if exists(join(dir, CACertFile)) {
		if ca, err = LoadCA(dir); err != nil {
			return nil, fmt.Errorf("pki: existing CA: %w", err)
		}
	} else {
		if ca, err = NewCA("skiff-ca"); err != nil {
			return nil, err
		}
		keyPEM, err := EncodeKeyPEM(ca.Key)
		if err != nil {
			return nil, err
		}
		if err := write(CAKeyFile, keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := write(CACertFile, ca.CertPEM, 0o644); err != nil {
			return nil, err
		}
	}

	keyPair := func(name string, issue func() (KeyPair, error)) (KeyPair, error) {
		certPath, keyPath := join(dir, name+".crt"), join(dir, name+".key")
		if exists(certPath) && exists(keyPath) {
			certPEM, err := os.ReadFile(certPath)
			if err != nil {
				return KeyPair{}, err
			}
			keyPEM, err := os.ReadFile(keyPath)
			return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}, err
		}
		kp, err := issue()
		if err != nil {
			return KeyPair{}, err
		}
		if err := write(name+".key", kp.KeyPEM, 0o600); err != nil {
			return KeyPair{}, err
		}
		return kp, write(name+".crt", kp.CertPEM, 0o644)
	}

	apiHosts := append(append([]string{}, DefaultAPIServerHosts...), opts.APIServerHosts...)
	if u, _ := url.Parse(opts.APIServerURL); u.Hostname() != "" {
		apiHosts = append(apiHosts, u.Hostname())
	}
	if _, err := keyPair(APIServerName, func() (KeyPair, error) { return ca.IssueServing("skiff-apiserver", apiHosts, 0) }); err != nil {
		return nil, err
	}
	for _, serving := range []struct {
		name, cn string
		hosts    []string
	}{
		{ExecProxyServingName, "skiff-exec-proxy", DefaultExecProxyHosts},
		{EtcdServerName, "skiff-etcd", DefaultEtcdHosts},
		{NATSServerName, "skiff-nats", DefaultNATSHosts},
	} {
		if _, err := keyPair(serving.name, func() (KeyPair, error) { return ca.IssueServing(serving.cn, serving.hosts, 0) }); err != nil {
			return nil, err
		}
	}
	for _, id := range []Identity{APIServerEtcdClient, APIServerNATSClient} {
		if _, err := keyPair(id.Name, func() (KeyPair, error) { return ca.IssueClient(id.CommonName, nil, 0) }); err != nil {
			return nil, err
		}
	}
	for _, id := range Identities {
		kp, err := keyPair(id.Name, func() (KeyPair, error) { return ca.IssueClient(id.CommonName, id.Organizations, 0) })
		if err != nil {
			return nil, err
		}
		name := id.Name + ".kubeconfig"
		if exists(join(dir, name)) {
			continue
		}
		data, err := Kubeconfig(opts.APIServerURL, ca.CertPEM, id.CommonName, &clientcmdapi.AuthInfo{
			ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM,
		})
		if err != nil {
			return nil, err
		}
		if err := write(name, data, 0o600); err != nil {
			return nil, err
		}
	}

	if !exists(join(dir, ServiceAccountKeyFile)) {
		keyPEM, pubPEM, err := newServiceAccountKey()
		if err != nil {
			return nil, err
		}
		if err := write(ServiceAccountKeyFile, keyPEM, 0o600); err != nil {
			return nil, err
		}
		if err := write(ServiceAccountPublicKeyFile, pubPEM, 0o644); err != nil {
			return nil, err
		}
	} else if !exists(join(dir, ServiceAccountPublicKeyFile)) {
		// The public half is derived from the key that exists, never a new one.
		keyPEM, err := os.ReadFile(join(dir, ServiceAccountKeyFile))
		if err != nil {
			return nil, err
		}
		key, err := ParseKeyPEM(keyPEM)
		if err != nil {
			return nil, fmt.Errorf("pki: existing %s: %w", ServiceAccountKeyFile, err)
		}
		pubPEM, err := EncodePublicKeyPEM(key.Public())
		if err != nil {
			return nil, err
		}
		if err := write(ServiceAccountPublicKeyFile, pubPEM, 0o644); err != nil {
			return nil, err
		}
	}

	tokenPath := join(dir, BootstrapTokenFile)
	if !exists(tokenPath) {
		tok, err := NewBootstrapToken(opts.TokenTTL)
		if err != nil {
			return nil, err
		}
		if err := write(BootstrapTokenFile, FormatBootstrapTokens([]BootstrapToken{tok}), 0o600); err != nil {
			return nil, err
		}
	}
	if !exists(join(dir, BootstrapKubeconfigFile)) {
		tokens, err := ReadBootstrapTokens(tokenPath)
		if err != nil {
			return nil, err
		}
		if len(tokens) == 0 {
			return nil, fmt.Errorf("pki: %s holds no token", tokenPath)
		}
		data, err := Kubeconfig(opts.APIServerURL, ca.CertPEM, "kubelet-bootstrap", &clientcmdapi.AuthInfo{Token: tokens[0].String()})
		if err != nil {
			return nil, err
		}
		if err := write(BootstrapKubeconfigFile, data, 0o600); err != nil {
			return nil, err
		}
	}
	return initNATSAuthCallout(dir, written)
}

// Kubeconfig is a kubeconfig with one cluster ("skiff", server, the CA embedded), one
// user named userName with auth, and a current context "skiff" joining them in the
// default namespace.
func Kubeconfig(server string, caPEM []byte, userName string, auth *clientcmdapi.AuthInfo) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["skiff"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[userName] = auth
	cfg.Contexts["skiff"] = &clientcmdapi.Context{Cluster: "skiff", AuthInfo: userName, Namespace: "default"}
	cfg.CurrentContext = "skiff"
	return clientcmd.Write(*cfg)
}

// WriteFileAtomic writes data to path through a temporary file and a rename, so a
// reader never sees half a file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode os.FileMode) error {
	if exists(path) {
		return fmt.Errorf("pki: %s exists", path)
	}
	return WriteFileAtomic(path, data, mode)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

func join(dir, name string) string { return filepath.Join(dir, name) }

// KeyPairFiles are the certificate and key paths of the key pair called name in dir.
func KeyPairFiles(dir, name string) (certFile, keyFile string) {
	return join(dir, name+".crt"), join(dir, name+".key")
}

// trimLines splits data into trimmed, non-empty lines that are not # comments.
func trimLines(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}
