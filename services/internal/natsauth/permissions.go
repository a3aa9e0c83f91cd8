package natsauth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/authentication/user"

	"skiff.dev/services/internal/pki"
)

// Account is the NATS account skiff's clients, the EVENTS stream and its consumer live in
// (JetStream is enabled for it alone). The apiserver is its configured user; every other
// client is placed in it by the auth callout with the permissions of Authorize.
const Account = "SKIFF"

// APIServerUser is the apiserver's NATS user: the subject of its client certificate
// (pki.APIServerNATSClient) as nats-server's TLS verify_and_map spells it. It has every
// permission in Account (JetStream's API, the EVENTS stream, the consumer) and answers
// the auth callout, which it is not itself subject to.
var APIServerUser = "CN=" + pki.APIServerNATSClient.CommonName

// nodeUserPrefix starts a node's user name, system:node:<name> (kube's
// NodeAuthorizer and x509 node identities).
const nodeUserPrefix = "system:node:"

// Permissions are the subjects a client may publish and subscribe to: allow lists,
// anything else is refused by nats-server with a permissions violation.
type Permissions struct {
	Publish, Subscribe []string
}

// Grant is the outcome of Authorize for one client certificate.
type Grant struct {
	// User is the client's user name, the certificate's CommonName.
	User string
	// Groups are its groups, the certificate's Organizations.
	Groups []string
	Permissions
}

// Authorize decides what the holder of the verified client certificate cert may do on
// NATS, by the identity the apiserver's x509 authenticator would give it (user CN,
// groups O):
//   - a node (CN system:node:<name>, O exactly [system:nodes], name a DNS-1123
//     subdomain) and any other identity without Organizations (the scheduler, the
//     controller-manager, csr-signer, ...) may publish only its own event subjects,
//     skiff.events.*.<PublisherToken(CN)>, and subscribe only its own inbox,
//     _INBOX.<PublisherToken(CN)>.>: no JetStream API, nobody else's events or replies;
//   - anything else is refused: a certificate with other Organizations
//     (system:masters included), a CN that looks like a node's and is not one, or a CN
//     no subject token stands for.
//
// Errors name why a certificate is refused.
func Authorize(cert *x509.Certificate) (Grant, error) {
	cn, orgs := cert.Subject.CommonName, cert.Subject.Organization
	if name, isNode := strings.CutPrefix(cn, nodeUserPrefix); isNode {
		if !slices.Equal(orgs, []string{user.NodesGroup}) {
			return Grant{}, fmt.Errorf("node user %q must be in exactly the %s group, has %q", cn, user.NodesGroup, orgs)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return Grant{}, fmt.Errorf("node user %q: node name: %s", cn, strings.Join(errs, "; "))
		}
	} else if len(orgs) > 0 {
		return Grant{}, fmt.Errorf("user %q in groups %q has no NATS permissions: only nodes and identities without groups publish events", cn, orgs)
	}
	if cn == pki.APIServerNATSClient.CommonName {
		// Its certificate maps to APIServerUser before any callout; one that reaches
		// here is not the apiserver's.
		return Grant{}, errors.New("the apiserver's NATS identity is not granted through the callout")
	}
	token, ok := PublisherToken(cn)
	if !ok {
		return Grant{}, fmt.Errorf("user %q has no NATS subject token", cn)
	}
	return Grant{
		User:   cn,
		Groups: orgs,
		Permissions: Permissions{
			Publish:   []string{EventSubjectPrefix + "*." + token},
			Subscribe: []string{inboxRoot + "." + token + ".>"},
		},
	}, nil
}
