// Package natsauth is who may do what on skiff's NATS: the
// event subjects that carry their publisher's identity, the permissions each client
// certificate gets, and the auth callout responder (nats-server's server/auth_callout.go,
// non-operator mode) that grants them. The recorder publishes on the subjects, the
// apiserver's event sink reads the publisher back from them, and the responder makes
// NATS enforce that nobody publishes under another's.
package natsauth

import (
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
)

// EventSubjectPrefix starts every event subject: skiff.events.<namespace>.<publisher>.
const EventSubjectPrefix = "skiff.events."

// EventSubjects is the subject filter of every event (the EVENTS stream's subjects).
const EventSubjects = EventSubjectPrefix + ">"

// inboxRoot is nats.go's default inbox prefix; each publisher gets its own branch of it.
const inboxRoot = "_INBOX"

// PublisherToken is the one NATS subject token that stands for user (a client
// certificate's CommonName): user with every '.' replaced by '_'. ok is false for a user
// no token stands for: empty, or holding '_', '*', '>', whitespace or another character
// that is not printable. Node names are DNS-1123 subdomains, which hold no '_', so the
// mapping is reversible (PublisherUser).
func PublisherToken(user string) (token string, ok bool) {
	if user == "" {
		return "", false
	}
	for _, r := range user {
		if r == '_' || r == '*' || r == '>' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return "", false
		}
	}
	return strings.ReplaceAll(user, ".", "_"), true
}

// PublisherUser is the user a PublisherToken stands for, the inverse of PublisherToken;
// ok is false for a string no user maps to.
func PublisherUser(token string) (user string, ok bool) {
	if token == "" || strings.Contains(token, ".") {
		return "", false
	}
	user = strings.ReplaceAll(token, "_", ".")
	if back, ok := PublisherToken(user); !ok || back != token {
		return "", false
	}
	return user, true
}

// EventSubject is the subject user publishes events of namespace on:
// "skiff.events.<namespace>.<PublisherToken(user)>". Errors: namespace is not a
// DNS-1123 label, or no token stands for user.
func EventSubject(namespace, user string) (string, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", fmt.Errorf("natsauth: namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	token, ok := PublisherToken(user)
	if !ok {
		return "", fmt.Errorf("natsauth: user %q has no NATS subject token", user)
	}
	return EventSubjectPrefix + namespace + "." + token, nil
}

// ParseEventSubject is the namespace and publishing user of an EventSubject. Errors:
// subject is not skiff.events.<DNS-1123 label>.<publisher token>.
func ParseEventSubject(subject string) (namespace, user string, err error) {
	rest, ok := strings.CutPrefix(subject, EventSubjectPrefix)
	if !ok {
		return "", "", fmt.Errorf("natsauth: %q is not an event subject", subject)
	}
	namespace, token, ok := strings.Cut(rest, ".")
	if !ok || len(validation.IsDNS1123Label(namespace)) > 0 {
		return "", "", fmt.Errorf("natsauth: event subject %q names no namespace", subject)
	}
	if user, ok = PublisherUser(token); !ok {
		return "", "", fmt.Errorf("natsauth: event subject %q names no publisher", subject)
	}
	return namespace, user, nil
}

// InboxPrefix is the inbox prefix of user's connections ("_INBOX.<PublisherToken(user)>",
// for nats.CustomInboxPrefix): the replies JetStream sends user arrive under it, and it
// is all user may subscribe to. Errors: no token stands for user.
func InboxPrefix(user string) (string, error) {
	token, ok := PublisherToken(user)
	if !ok {
		return "", fmt.Errorf("natsauth: user %q has no NATS subject token", user)
	}
	return inboxRoot + "." + token, nil
}
