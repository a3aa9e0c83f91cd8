package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Files in a PKI directory, laid out as kubeadm's /etc/kubernetes/pki. Each key pair is
// <name>.crt and <name>.key; names under etcd/ are in the etcd subdirectory.
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
	// EtcdServerName is etcd's serving key pair (port 2379), issued by the etcd CA
	// (kubeadm's etcd/server); etcd verifies its clients against the etcd CA only.
	EtcdServerName = "etcd/server"
	// EtcdPeerName is etcd's peer key pair (port 2380), issued by the etcd CA (kubeadm's
	// etcd/peer).
	EtcdPeerName = "etcd/peer"
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

// Authority names a certificate authority of a PKI directory: its files are <Name>.crt
// and <Name>.key.
type Authority struct {
	// Name is the file stem, e.g. "ca" or "etcd/ca".
	Name string
	// CommonName is the CA certificate's subject.
	CommonName string
}

// The three authorities of kubeadm's trust model: each vouches for one kind of peer, so
// a certificate of one is worth nothing at another's doors.
var (
	// ClusterCA issues the apiserver's serving certificate and every identity toward the
	// API (components, kubelets through their CSRs, NATS clients).
	ClusterCA = Authority{Name: "ca", CommonName: "skiff-ca"}
	// EtcdCA issues etcd's serving and peer certificates and the two clients etcd
	// accepts: the apiserver's (apiserver-etcd-client) and the health check's. Nothing
	// else chains to it.
	EtcdCA = Authority{Name: "etcd/ca", CommonName: "skiff-etcd-ca"}
	// FrontProxyCA issues front-proxy-client, the apiserver's identity toward exec-proxy
	// (kube-apiserver's --requestheader-client-ca-file and --proxy-client-cert-file).
	FrontProxyCA = Authority{Name: "front-proxy-ca", CommonName: "skiff-front-proxy-ca"}
)

// Files are the authority's certificate and key paths in dir.
func (a Authority) Files(dir string) (certFile, keyFile string) { return KeyPairFiles(dir, a.Name) }

// Identity is a client certificate Init issues: the peer sees CommonName as the user
// and Organizations as the groups.
type Identity struct {
	// Name is the file stem (<Name>.crt, <Name>.key, <Name>.kubeconfig).
	Name          string
	CommonName    string
	Organizations []string
}

// The identities of skiff's services. Kubelets are not here:
// each earns its own through a CertificateSigningRequest.
var (
	Admin     = Identity{Name: "admin", CommonName: "admin", Organizations: []string{"system:masters"}}
	Scheduler = Identity{Name: "scheduler", CommonName: "system:kube-scheduler"}
	// ControllerManager is kube-controller-manager's identity.
	ControllerManager = Identity{Name: "controller-manager", CommonName: "system:kube-controller-manager"}
	CSRSigner         = Identity{Name: "csr-signer", CommonName: "system:skiff:csr-signer"}
	ExecProxy         = Identity{Name: "exec-proxy", CommonName: "system:skiff:exec-proxy"}
	// KubeProxy is the proxy's identity, kube's system:kube-proxy user (bound to the
	// system:node-proxier ClusterRole), for a proxy run beside the control plane (the
	// all-in-one's). A node's proxy elsewhere runs as its node.
	KubeProxy = Identity{Name: "kube-proxy", CommonName: "system:kube-proxy"}
	// CoreDNS is cluster DNS's identity toward the apiserver (CoreDNS's kubernetes
	// plugin reads coredns.kubeconfig), bound to kubeadm's system:coredns ClusterRole.
	CoreDNS = Identity{Name: "coredns", CommonName: "system:coredns"}
)

// Identities are the client identities of the cluster CA that Init issues, each with a
// kubeconfig.
var Identities = []Identity{Admin, Scheduler, ControllerManager, CSRSigner, ExecProxy, KubeProxy, CoreDNS}

// FrontProxyClient is the apiserver's identity toward exec-proxy, issued by the front-proxy
// CA: exec-proxy trusts X-Remote-User/X-Remote-Group only from it (kube's
// --requestheader-allowed-names default, front-proxy-client). It has no kubeconfig: it
// is nobody toward the API.
var FrontProxyClient = Identity{Name: "front-proxy-client", CommonName: "front-proxy-client"}

// APIServerEtcdClient is the apiserver's identity toward etcd (kubeadm's
// apiserver-etcd-client), issued by the etcd CA; it has no kubeconfig, etcd is not the API.
var APIServerEtcdClient = Identity{Name: "apiserver-etcd-client", CommonName: "kube-apiserver-etcd-client"}

// EtcdHealthcheckClient is the identity etcd's own health check uses (kubeadm's
// etcd/healthcheck-client), issued by the etcd CA; it lives beside etcd only.
var EtcdHealthcheckClient = Identity{Name: "etcd/healthcheck-client", CommonName: "kube-etcd-healthcheck-client"}

// EtcdClientCommonNames are the client certificate CNs etcd accepts (etcd's
// client-transport-security allowed-cn), on top of the etcd CA's signature.
var EtcdClientCommonNames = []string{APIServerEtcdClient.CommonName, EtcdHealthcheckClient.CommonName}

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

// obsoleteFiles are what earlier layouts wrote and nothing reads any more: etcd's
// serving pair from the cluster CA, and a kubeconfig for front-proxy-client, which is no
// API identity. Init removes them.
var obsoleteFiles = []string{"etcd-server.crt", "etcd-server.key", "front-proxy-client.kubeconfig"}

// InitOptions says what Init makes.
type InitOptions struct {
	// Dir is the PKI directory; created (0700) if missing.
	Dir string
	// APIServerURL is the server written into the kubeconfigs, e.g.
	// "https://127.0.0.1:6443" (the default).
	APIServerURL string
	// APIServerHosts are extra SANs (DNS names or IPs) for the apiserver certificate.
	APIServerHosts []string
	// Hosts are extra SANs (DNS names or IPs) for every serving certificate of the
	// control plane's host: the apiserver's, exec-proxy's, NATS's and etcd's (the
	// all-in-one's --bind-address, which a kubelet on another host dials). A certificate
	// that exists is kept as it is: a new address needs a new directory.
	Hosts []string
	// TokenTTL is the lifetime of a bootstrap token Init makes (when the directory has
	// none that is still valid); 0 means it never expires. DefaultBootstrapTokenTTL is
	// kubeadm's 24 h.
	TokenTTL time.Duration
}

// Init creates what is missing in opts.Dir, as kubeadm's `init phase certs` and
// `kubeconfig` do: the cluster, etcd and front-proxy CAs; the apiserver's, exec-proxy's,
// etcd's (serving and peer) and NATS's serving certificates; the apiserver's clients of
// etcd (etcd CA), NATS (cluster CA) and exec-proxy (front-proxy CA); etcd's health-check
// client; a client certificate and kubeconfig for every Identity; a bootstrap token
// (again when every one in the file has expired), the kubelet bootstrap kubeconfig
// holding it, the service-account signing key (sa.key, sa.pub) and the key that signs
// NATS's auth callout answers (nats-auth-callout.nk).
// Existing files are kept, so Init is idempotent and safe to run at every start, except a
// key pair that does not chain to the authority that must issue it (a directory from an
// older layout, where the cluster CA issued everything): that one is issued again, and
// the files the old layout alone used are removed. It returns the names of the files it
// wrote. Errors: an unwritable directory, an existing CA that does not load.
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
	dir := opts.Dir
	for _, sub := range []string{dir, filepath.Join(dir, "etcd")} {
		if err := os.MkdirAll(sub, 0o700); err != nil {
			return nil, err
		}
	}
	w := &writer{dir: dir}
	cas := map[Authority]*CA{}
	for _, a := range []Authority{ClusterCA, EtcdCA, FrontProxyCA} {
		if cas[a], err = w.authority(a); err != nil {
			return nil, err
		}
	}
	ca := cas[ClusterCA]

	hosts := func(defaults []string, extra ...[]string) []string {
		all := append([]string{}, defaults...)
		for _, e := range append(extra, opts.Hosts) {
			for _, h := range e {
				if !slices.Contains(all, h) {
					all = append(all, h)
				}
			}
		}
		return all
	}
	apiHosts := hosts(DefaultAPIServerHosts, opts.APIServerHosts)
	if u, _ := url.Parse(opts.APIServerURL); u.Hostname() != "" {
		apiHosts = append(apiHosts, u.Hostname())
	}
	serving := func(cn string, hosts []string) func(*CA) (KeyPair, error) {
		return func(ca *CA) (KeyPair, error) { return ca.IssueServing(cn, hosts, 0) }
	}
	client := func(id Identity) func(*CA) (KeyPair, error) {
		return func(ca *CA) (KeyPair, error) { return ca.IssueClient(id.CommonName, id.Organizations, 0) }
	}
	// etcd's serving and peer certificates are also its clients' (a member dials its
	// peers, and etcd's gRPC gateway dials etcd itself), as kubeadm issues them.
	etcdMember := func(cn string) func(*CA) (KeyPair, error) {
		return func(ca *CA) (KeyPair, error) { return ca.IssueServingAndClient(cn, hosts(DefaultEtcdHosts), 0) }
	}
	pairs := []struct {
		name   string
		issuer Authority
		issue  func(*CA) (KeyPair, error)
	}{
		{APIServerName, ClusterCA, serving("skiff-apiserver", apiHosts)},
		{ExecProxyServingName, ClusterCA, serving("skiff-exec-proxy", hosts(DefaultExecProxyHosts))},
		{NATSServerName, ClusterCA, serving("skiff-nats", hosts(DefaultNATSHosts))},
		{APIServerNATSClient.Name, ClusterCA, client(APIServerNATSClient)},
		{EtcdServerName, EtcdCA, etcdMember("skiff-etcd")},
		{EtcdPeerName, EtcdCA, etcdMember("skiff-etcd-peer")},
		{APIServerEtcdClient.Name, EtcdCA, client(APIServerEtcdClient)},
		{EtcdHealthcheckClient.Name, EtcdCA, client(EtcdHealthcheckClient)},
		{FrontProxyClient.Name, FrontProxyCA, client(FrontProxyClient)},
	}
	for _, p := range pairs {
		if _, err := w.keyPair(p.name, cas[p.issuer], p.issue); err != nil {
			return nil, err
		}
	}
	for _, id := range Identities {
		kp, err := w.keyPair(id.Name, ca, client(id))
		if err != nil {
			return nil, err
		}
		name := id.Name + ".kubeconfig"
		if exists(join(dir, name)) && !kp.fresh {
			continue
		}
		data, err := Kubeconfig(opts.APIServerURL, ca.CertPEM, id.CommonName, &clientcmdapi.AuthInfo{
			ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM,
		})
		if err != nil {
			return nil, err
		}
		if err := w.write(name, data, 0o600); err != nil {
			return nil, err
		}
	}
	for _, name := range obsoleteFiles {
		if err := os.Remove(join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}

	if err := w.serviceAccountKey(); err != nil {
		return nil, err
	}

	// A directory whose tokens have all expired gets a fresh one, and the bootstrap
	// kubeconfig follows the token in use.
	tokenPath := join(dir, BootstrapTokenFile)
	before, _ := os.ReadFile(tokenPath)
	tok, err := EnsureBootstrapToken(tokenPath, opts.TokenTTL, 0)
	if err != nil {
		return nil, err
	}
	if after, _ := os.ReadFile(tokenPath); string(after) != string(before) {
		w.written = append(w.written, BootstrapTokenFile)
	}
	bootstrapPath := join(dir, BootstrapKubeconfigFile)
	if current, err := clientcmd.LoadFromFile(bootstrapPath); err != nil || !holdsToken(current, tok.String()) {
		data, err := Kubeconfig(opts.APIServerURL, ca.CertPEM, "kubelet-bootstrap", &clientcmdapi.AuthInfo{Token: tok.String()})
		if err != nil {
			return nil, err
		}
		if err := w.write(BootstrapKubeconfigFile, data, 0o600); err != nil {
			return nil, err
		}
	}
	return initNATSAuthCallout(dir, w.written)
}

// holdsToken reports whether cfg's current user authenticates with token.
func holdsToken(cfg *clientcmdapi.Config, token string) bool {
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return false
	}
	auth, ok := cfg.AuthInfos[ctx.AuthInfo]
	return ok && auth.Token == token
}

// writer writes Init's files into dir and remembers their names.
type writer struct {
	dir     string
	written []string
}

// write replaces the file name (relative to dir) with data, atomically.
func (w *writer) write(name string, data []byte, mode os.FileMode) error {
	if err := WriteFileAtomic(join(w.dir, name), data, mode); err != nil {
		return err
	}
	w.written = append(w.written, name)
	return nil
}

// authority loads the CA a, or makes it when its certificate is missing.
func (w *writer) authority(a Authority) (*CA, error) {
	certFile, keyFile := a.Files(w.dir)
	if exists(certFile) {
		ca, err := LoadCAFiles(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("pki: existing %s: %w", a.Name, err)
		}
		return ca, nil
	}
	ca, err := NewCA(a.CommonName)
	if err != nil {
		return nil, err
	}
	keyPEM, err := EncodeKeyPEM(ca.Key)
	if err != nil {
		return nil, err
	}
	if err := w.write(a.Name+".key", keyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, w.write(a.Name+".crt", ca.CertPEM, 0o644)
}

// initPair is a key pair Init keeps or wrote; fresh when written now.
type initPair struct {
	KeyPair
	fresh bool
}

// keyPair returns the key pair name of dir when it exists and chains to ca, or issues it
// with issue and writes it.
func (w *writer) keyPair(name string, ca *CA, issue func(*CA) (KeyPair, error)) (initPair, error) {
	certPath, keyPath := KeyPairFiles(w.dir, name)
	if exists(certPath) && exists(keyPath) {
		certPEM, err := os.ReadFile(certPath)
		if err != nil {
			return initPair{}, err
		}
		keyPEM, err := os.ReadFile(keyPath)
		if err != nil {
			return initPair{}, err
		}
		if cert, err := ParseCertPEM(certPEM); err == nil && cert.CheckSignatureFrom(ca.Cert) == nil {
			return initPair{KeyPair: KeyPair{CertPEM: certPEM, KeyPEM: keyPEM}}, nil
		}
	}
	kp, err := issue(ca)
	if err != nil {
		return initPair{}, err
	}
	if err := w.write(name+".key", kp.KeyPEM, 0o600); err != nil {
		return initPair{}, err
	}
	return initPair{KeyPair: kp, fresh: true}, w.write(name+".crt", kp.CertPEM, 0o644)
}

// serviceAccountKey makes sa.key and sa.pub when missing; a missing sa.pub is derived
// from the sa.key that exists, never from a new key.
func (w *writer) serviceAccountKey() error {
	if !exists(join(w.dir, ServiceAccountKeyFile)) {
		keyPEM, pubPEM, err := newServiceAccountKey()
		if err != nil {
			return err
		}
		if err := w.write(ServiceAccountKeyFile, keyPEM, 0o600); err != nil {
			return err
		}
		return w.write(ServiceAccountPublicKeyFile, pubPEM, 0o644)
	}
	if exists(join(w.dir, ServiceAccountPublicKeyFile)) {
		return nil
	}
	keyPEM, err := os.ReadFile(join(w.dir, ServiceAccountKeyFile))
	if err != nil {
		return err
	}
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("pki: existing %s: %w", ServiceAccountKeyFile, err)
	}
	pubPEM, err := EncodePublicKeyPEM(key.Public())
	if err != nil {
		return err
	}
	return w.write(ServiceAccountPublicKeyFile, pubPEM, 0o644)
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
