package natsauth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"skiff.dev/services/internal/pki"
)

// CalloutSubject is where nats-server sends its authorization requests
// (server.AuthCalloutSubject), in Account.
const CalloutSubject = "$SYS.REQ.USER.AUTH"

// CalloutQueue is the queue group responders share, so that each request is answered
// once however many apiservers run.
const CalloutQueue = "skiff-auth-callout"

// Responder answers nats-server's auth callout for every client that is not a configured
// user: it reads the client certificate NATS verified from the request's TLS
// information, verifies it again against ClientCAs, decides with Authorize, and answers
// with a user JWT holding the granted permissions, signed by Issuer, or with the refusal
// (nats-server then closes the connection with an authorization violation). Mirrors the
// non-operator-mode service of nats-server's server/auth_callout.go.
type Responder struct {
	// Issuer signs the answers: the account key of pki.NATSAuthCalloutSeedFile, whose
	// public key is the server's auth_callout issuer.
	Issuer nkeys.KeyPair
	// ClientCAs verifies the client certificate of each request (the cluster CA).
	ClientCAs *x509.CertPool
	// Log receives the refusals; nil means slog.Default().
	Log *slog.Logger
}

// Run connects to url with opts (the apiserver's identity, APIServerUser) and answers
// authorization requests until ctx ends, reconnecting as long as it takes; it returns nil
// then. Errors: opts are unusable, or Issuer or ClientCAs is missing.
func (r *Responder) Run(ctx context.Context, url string, opts ...nats.Option) error {
	if r.Issuer == nil || r.ClientCAs == nil {
		return errors.New("natsauth: Responder needs an Issuer and ClientCAs")
	}
	opts = append([]nats.Option{
		nats.Name("skiff-apiserver-auth-callout"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A NATS whose configuration does not know the apiserver yet refuses it as any
		// other: keep trying rather than give up after two refusals.
		nats.IgnoreAuthErrorAbort(),
	}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("natsauth: connect to NATS %s: %w", url, err)
	}
	defer nc.Close()
	// nats.go subscribes again after every reconnect, and queues the subscription
	// until the first connect succeeds.
	if _, err := nc.QueueSubscribe(CalloutSubject, CalloutQueue, r.serve); err != nil {
		return fmt.Errorf("natsauth: subscribe %s: %w", CalloutSubject, err)
	}
	<-ctx.Done()
	return nil
}

// serve answers one authorization request.
func (r *Responder) serve(msg *nats.Msg) {
	answer, err := r.Respond(msg.Data)
	if err != nil {
		r.log().Warn("unanswerable NATS authorization request", "err", err)
		return
	}
	if err := msg.Respond(answer); err != nil {
		r.log().Warn("answering a NATS authorization request", "err", err)
	}
}

// Respond is the answer to request, an authorization request JWT from nats-server: an
// authorization response JWT for the request's user nkey and server, signed by Issuer,
// that holds either a user JWT (account Account, name the certificate's CN, the
// permissions of Authorize, expiring with the certificate) or the reason it is refused.
// Errors: request is not a server's authorization request, so nothing can be answered.
func (r *Responder) Respond(request []byte) ([]byte, error) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(request))
	if err != nil {
		return nil, fmt.Errorf("natsauth: authorization request: %w", err)
	}
	if req.UserNkey == "" || req.Server.ID == "" || req.Issuer != req.Server.ID {
		return nil, errors.New("natsauth: authorization request not issued by the server it names")
	}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	userJWT, err := r.grant(req)
	if err != nil {
		r.log().Warn("NATS client refused", "client", req.ClientInformation.Host, "name", req.ClientInformation.Name, "reason", err)
		resp.Error = err.Error()
	} else {
		resp.Jwt = userJWT
	}
	encoded, err := resp.Encode(r.Issuer)
	if err != nil {
		return nil, fmt.Errorf("natsauth: authorization response: %w", err)
	}
	return []byte(encoded), nil
}

// grant is the user JWT of req's client, or why it gets none.
func (r *Responder) grant(req *jwt.AuthorizationRequestClaims) (string, error) {
	cert, err := r.clientCertificate(req.TLS)
	if err != nil {
		return "", err
	}
	g, err := Authorize(cert)
	if err != nil {
		return "", err
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Audience = Account // non-operator mode: the account the user is placed in
	uc.Name = g.User
	uc.Pub.Allow.Add(g.Publish...)
	uc.Sub.Allow.Add(g.Subscribe...)
	uc.AllowedConnectionTypes.Add(jwt.ConnectionTypeStandard)
	// A connection lasts no longer than the certificate that opened it: a rotated
	// kubelet certificate is presented again on the next connect.
	uc.Expires = cert.NotAfter.Unix()
	return uc.Encode(r.Issuer)
}

// clientCertificate is the leaf of the chain NATS verified, verified again against
// ClientCAs for client authentication. Errors: no verified chain, or one that does not
// verify.
func (r *Responder) clientCertificate(tlsInfo *jwt.ClientTLS) (*x509.Certificate, error) {
	if tlsInfo == nil || len(tlsInfo.VerifiedChains) == 0 || len(tlsInfo.VerifiedChains[0]) == 0 {
		return nil, errors.New("no verified client certificate")
	}
	chain := tlsInfo.VerifiedChains[0]
	leaf, err := pki.ParseCertPEM([]byte(chain[0]))
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		if cert, err := pki.ParseCertPEM([]byte(c)); err == nil {
			intermediates.AddCert(cert)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots: r.ClientCAs, Intermediates: intermediates,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("client certificate %q: %w", leaf.Subject.CommonName, err)
	}
	return leaf, nil
}

func (r *Responder) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}
