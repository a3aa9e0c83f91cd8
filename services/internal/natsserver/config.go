package natsserver

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/nats-io/nats-server/v2/server"

	"skiff.dev/services/internal/natsauth"
	"skiff.dev/services/internal/pki"
)

// serverName is the server's name in every configuration skiff runs NATS with.
const serverName = "skiff"

// tlsTimeout is the seconds a client has to finish its TLS handshake, nats-server's
// default.
const tlsTimeout = 2

// DefaultPort is NATS's client port.
const DefaultPort = 4222

// ConfigFile is what skiff's nats-server configuration file says: the one compose's
// nats:2.15.2 container runs (`skiff nats-config`) and the one the embedded server
// loads (Config.PKIDir), so both admit and authorize the same clients.
type ConfigFile struct {
	// Host and Port are where the server listens for clients, e.g. "0.0.0.0" and 4222;
	// Port -1 picks a free one.
	Host string
	Port int
	// StoreDir holds JetStream's streams (file storage).
	StoreDir string
	// CertFile and KeyFile are the server's key pair (pki: nats-server.crt, .key);
	// CAFile is the CA every client's certificate must verify against (ca.crt).
	CertFile, KeyFile, CAFile string
	// CalloutIssuer is the public account nkey ("A...") whose signature the server
	// trusts on the auth callout's answers (pki.NATSAuthCalloutIssuer).
	CalloutIssuer string
}

// ConfigFileFromPKI is the ConfigFile of the `skiff pki init` directory pkiDir as a
// server sees it with the key pair and CA under certDir ("" means pkiDir), e.g. in
// compose's nats container with /etc/nats holding nats-server.crt, nats-server.key and
// ca.crt: the issuer is the public half of pkiDir's nats-auth-callout.nk, which the
// server itself never needs. It listens on 0.0.0.0:4222 and stores in /data; callers
// change what differs. Errors: pkiDir has no callout key (run `skiff pki init`).
func ConfigFileFromPKI(pkiDir, certDir string) (ConfigFile, error) {
	issuer, err := pki.NATSAuthCalloutIssuer(filepath.Join(pkiDir, pki.NATSAuthCalloutSeedFile))
	if err != nil {
		return ConfigFile{}, fmt.Errorf("natsserver: %w", err)
	}
	if certDir == "" {
		certDir = pkiDir
	}
	certFile, keyFile := pki.KeyPairFiles(certDir, pki.NATSServerName)
	return ConfigFile{
		Host: "0.0.0.0", Port: DefaultPort, StoreDir: "/data",
		CertFile: certFile, KeyFile: keyFile, CAFile: filepath.Join(certDir, pki.CACertFile),
		CalloutIssuer: issuer,
	}, nil
}

// configTemplate is nats-server's configuration format
// (https://docs.nats.io/running-a-nats-service/configuration): every value is a quoted
// string or a number, so nothing in it is read as a variable.
var configTemplate = template.Must(template.New("nats-server.conf").Funcs(template.FuncMap{"q": quote}).Parse(
	`# skiff's NATS (rendered by skiff nats-config). Every client presents a certificate from
# the cluster CA (verify_and_map). The apiserver's maps to the configured user below,
# which may do anything in account {{.Account}}; every other client is decided by the
# apiserver's auth callout, which grants it its own event subjects and inbox only.
server_name: {{q .ServerName}}
host: {{q .Host}}
port: {{.Port}}

jetstream {
  store_dir: {{q .StoreDir}}
}

tls {
  cert_file: {{q .CertFile}}
  key_file: {{q .KeyFile}}
  ca_file: {{q .CAFile}}
  verify_and_map: true
  timeout: {{.TLSTimeout}}
}

accounts {
  {{q .Account}} {
    jetstream: enabled
    users: [
      {user: {{q .APIServerUser}}}
    ]
  }
}

authorization {
  auth_callout {
    issuer: {{q .CalloutIssuer}}
    account: {{q .Account}}
    auth_users: [{{q .APIServerUser}}]
  }
}
`))

// RenderConfig is c as a nats-server configuration file. Errors: a field is missing, or
// a path holds a control character.
func RenderConfig(c ConfigFile) ([]byte, error) {
	for name, v := range map[string]string{"Host": c.Host, "StoreDir": c.StoreDir, "CertFile": c.CertFile, "KeyFile": c.KeyFile,
		"CAFile": c.CAFile, "CalloutIssuer": c.CalloutIssuer} {
		if v == "" {
			return nil, fmt.Errorf("natsserver: ConfigFile.%s is required", name)
		}
	}
	var buf bytes.Buffer
	err := configTemplate.Execute(&buf, struct {
		ConfigFile
		ServerName, Account, APIServerUser string
		TLSTimeout                         int
	}{c, serverName, natsauth.Account, natsauth.APIServerUser, tlsTimeout})
	if err != nil {
		return nil, fmt.Errorf("natsserver: render configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// LoadConfig is c as the options of an embedded server, read by nats-server's own parser
// from RenderConfig's text, so the embedded server runs the configuration a nats-server
// binary would. Errors: RenderConfig's, or nats-server's on the text (a key pair that
// does not load, an invalid issuer).
func LoadConfig(c ConfigFile) (*server.Options, error) {
	text, err := RenderConfig(c)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(string(text)); err != nil {
		// As server.ProcessConfigFile: warnings alone do not fail.
		var problems interface{ Errors() []error }
		if !errors.As(err, &problems) || len(problems.Errors()) > 0 {
			return nil, fmt.Errorf("natsserver: configuration: %w", err)
		}
	}
	return opts, nil
}

// quote is s as a double-quoted string of nats-server's configuration format, whose
// escapes are \\ and \"; it fails on control characters, which no path or key holds.
func quote(s string) (string, error) {
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", errors.New("control character in a configuration value")
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`, nil
}
