package pki

import (
	"testing"
	"time"
)

// FuzzParseBootstrapToken: a bearer token is either refused or splits into an id and a
// secret of kube's shape that join back into exactly the token.
func FuzzParseBootstrapToken(f *testing.F) {
	f.Add("abcdef.0123456789abcdef")
	f.Add("abcdef.0123456789abcdef\n")
	f.Add("ABCDEF.0123456789ABCDEF")
	f.Add("abcdef..0123456789abcde")
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := ParseBootstrapToken(s)
		if !ok {
			if id != "" || secret != "" {
				t.Fatalf("%q refused but gave %q %q", s, id, secret)
			}
			return
		}
		if len(id) != 6 || len(secret) != 16 || id+"."+secret != s {
			t.Fatalf("%q parsed as %q . %q", s, id, secret)
		}
		for _, c := range id + secret {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				t.Fatalf("%q parsed with character %q", s, c)
			}
		}
	})
}

// FuzzParseBootstrapTokens: a bootstrap token file either fails to parse or its tokens
// format to a file that parses to the same tokens.
func FuzzParseBootstrapTokens(f *testing.F) {
	f.Add([]byte("# comment\nabcdef.0123456789abcdef\nghijkl.0123456789abcdef,2030-01-02T03:04:05Z\n"))
	f.Add([]byte("abcdef.0123456789abcdef,2030-01-02T03:04:05+07:00"))
	f.Add([]byte("abcdef.0123456789abcdef,not a time\n"))
	f.Add([]byte("\r\n\t,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := ParseBootstrapTokens(data)
		if err != nil {
			return
		}
		again, err := ParseBootstrapTokens(FormatBootstrapTokens(tokens))
		if err != nil {
			t.Fatalf("formatted tokens do not parse: %v", err)
		}
		if len(again) != len(tokens) {
			t.Fatalf("%d tokens became %d", len(tokens), len(again))
		}
		for i := range tokens {
			// The file holds whole seconds in RFC 3339.
			want := tokens[i].Expiration.Truncate(time.Second)
			if again[i].ID != tokens[i].ID || again[i].Secret != tokens[i].Secret || !again[i].Expiration.Equal(want) {
				t.Fatalf("token %d: %+v became %+v", i, tokens[i], again[i])
			}
		}
	})
}
