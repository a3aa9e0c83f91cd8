package natsauth_test

import (
	"testing"

	"skiff.dev/services/internal/natsauth"
)

func TestPublisherTokens(t *testing.T) {
	for _, tc := range []struct {
		name, user, token string // token "" means the user has none
	}{
		{"a node's dots become underscores", "system:node:node-a.example.com", "system:node:node-a_example_com"},
		{"a control-plane identity keeps its colons", "system:kube-scheduler", "system:kube-scheduler"},
		{"an empty user has no token", "", ""},
		{"an underscore would make the mapping ambiguous", "system:node:a_b", ""},
		{"a wildcard is no token", "*", ""},
		{"a full wildcard is no token", "a>", ""},
		{"whitespace is no token", "system:node:a b", ""},
		{"a control character is no token", "a\x01b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token, ok := natsauth.PublisherToken(tc.user)
			if ok != (tc.token != "") || token != tc.token {
				t.Fatalf("PublisherToken(%q) = %q, %v; want %q", tc.user, token, ok, tc.token)
			}
			if !ok {
				return
			}
			if back, ok := natsauth.PublisherUser(token); !ok || back != tc.user {
				t.Fatalf("PublisherUser(%q) = %q, %v; want %q back", token, back, ok, tc.user)
			}
		})
	}
}

func TestEventSubjectsRoundTrip(t *testing.T) {
	subject, err := natsauth.EventSubject("kube-system", "system:node:node-a.lan")
	if err != nil || subject != "skiff.events.kube-system.system:node:node-a_lan" {
		t.Fatalf("EventSubject = %q, %v", subject, err)
	}
	namespace, user, err := natsauth.ParseEventSubject(subject)
	if err != nil || namespace != "kube-system" || user != "system:node:node-a.lan" {
		t.Fatalf("ParseEventSubject(%q) = %q, %q, %v", subject, namespace, user, err)
	}
	inbox, err := natsauth.InboxPrefix("system:node:node-a.lan")
	if err != nil || inbox != "_INBOX.system:node:node-a_lan" {
		t.Fatalf("InboxPrefix = %q, %v", inbox, err)
	}
	if _, err := natsauth.EventSubject("Not_A_Namespace", "system:kube-scheduler"); err == nil {
		t.Error("EventSubject accepted a namespace that is no DNS label")
	}
	if _, err := natsauth.EventSubject("default", "a_b"); err == nil {
		t.Error("EventSubject accepted a user with no token")
	}
}

func TestParseEventSubjectRefusesSubjectsWithoutAPublisher(t *testing.T) {
	for _, subject := range []string{
		"skiff.events.default",                         // the old layout: no publisher
		"skiff.events.default.system:node:a.extra",     // a token too many
		"skiff.events.Default.system:kube-scheduler",   // no namespace
		"skiff.events..system:kube-scheduler",          // empty namespace
		"skiff.events.default.",                        // empty publisher
		"other.events.default.system:kube-scheduler",   // not an event subject
		"skiff.events.default.system:node:a_b_c.",      // trailing dot
		"skiff.events.default.system:node:" + "a\x00b", // not printable
	} {
		if ns, user, err := natsauth.ParseEventSubject(subject); err == nil {
			t.Errorf("ParseEventSubject(%q) = %q, %q; want an error", subject, ns, user)
		}
	}
}
