package pki

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestEnsureBootstrapToken(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	const ttl, minValid = 24 * time.Hour, time.Hour
	token := func(id string, expiration time.Time) BootstrapToken {
		return BootstrapToken{ID: id, Secret: "0123456789abcdef", Expiration: expiration}
	}
	var (
		expired  = token("expird", now.Add(-time.Minute))
		soon     = token("soonnn", now.Add(10*time.Minute))
		valid    = token("validd", now.Add(12*time.Hour))
		later    = token("laterr", now.Add(20*time.Hour))
		forever  = token("foreve", time.Time{})
		newToken = BootstrapToken{} // a token EnsureBootstrapToken makes
	)
	cases := []struct {
		name string
		file []BootstrapToken // nil: no file
		// want is the token returned (newToken: a fresh one); kept are the file's tokens
		// still in it afterwards, in order, followed by the fresh one if any.
		want BootstrapToken
		kept []BootstrapToken
	}{
		{name: "a missing file is created with a fresh token", want: newToken},
		{name: "an empty file gets a fresh token", file: []BootstrapToken{}, want: newToken},
		{name: "a token valid long enough is given out and the file left alone", file: []BootstrapToken{valid}, want: valid, kept: []BootstrapToken{valid}},
		{name: "an expired token is dropped and a fresh one added", file: []BootstrapToken{expired}, want: newToken},
		{name: "an expired token is dropped beside a valid one", file: []BootstrapToken{expired, valid}, want: valid, kept: []BootstrapToken{valid}},
		{name: "a token expiring within minValid is kept but a fresh one given out", file: []BootstrapToken{soon}, want: newToken, kept: []BootstrapToken{soon}},
		{name: "of several valid tokens the one expiring last is given out", file: []BootstrapToken{valid, later, soon}, want: later, kept: []BootstrapToken{valid, later, soon}},
		{name: "a token that never expires is kept but not given out", file: []BootstrapToken{later, forever}, want: later, kept: []BootstrapToken{later, forever}},
		{name: "a token that never expires alone: a fresh one is given out", file: []BootstrapToken{forever}, want: newToken, kept: []BootstrapToken{forever}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), BootstrapTokenFile)
			var before []byte
			if tc.file != nil {
				before = FormatBootstrapTokens(tc.file)
				if err := os.WriteFile(path, before, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := EnsureBootstrapToken(path, ttl, minValid)
			if err != nil {
				t.Fatal(err)
			}
			after, err := ReadBootstrapTokens(path)
			if err != nil {
				t.Fatal(err)
			}
			wantFile := tc.kept
			if tc.want == newToken {
				if got.ID == "" || got.Secret == "" || got.Expiration.Sub(now) < ttl-time.Minute || got.Expiration.Sub(now) > ttl+time.Minute {
					t.Fatalf("fresh token %+v, want one expiring in %v", got, ttl)
				}
				wantFile = append(append([]BootstrapToken{}, tc.kept...), got)
			} else if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if !equalTokens(after, wantFile) {
				t.Fatalf("file holds %+v, want %+v", after, wantFile)
			}
			if tc.file != nil && len(tc.kept) == len(tc.file) && tc.want != newToken {
				if data, _ := os.ReadFile(path); !bytes.Equal(data, before) {
					t.Fatal("the file was rewritten though nothing changed")
				}
				return
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Fatalf("written file mode %v, %v; want 0600", st.Mode(), err)
			}
		})
	}
}

func TestEnsureBootstrapTokenRefuses(t *testing.T) {
	dir := t.TempDir()
	t.Run("a malformed file is an error and left as it is", func(t *testing.T) {
		path := filepath.Join(dir, "malformed")
		if err := os.WriteFile(path, []byte("not a token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureBootstrapToken(path, time.Hour, time.Minute); err == nil {
			t.Fatal("no error")
		}
		if data, _ := os.ReadFile(path); string(data) != "not a token\n" {
			t.Fatalf("file became %q", data)
		}
	})
	t.Run("a lifetime shorter than minValid is an error", func(t *testing.T) {
		if _, err := EnsureBootstrapToken(filepath.Join(dir, "short"), time.Minute, time.Hour); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("a lifetime of 0 makes a token that never expires", func(t *testing.T) {
		got, err := EnsureBootstrapToken(filepath.Join(dir, "forever"), 0, time.Hour)
		if err != nil || !got.Expiration.IsZero() {
			t.Fatalf("got %+v, %v; want a token without expiration", got, err)
		}
	})
}

func equalTokens(a, b []BootstrapToken) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ID != b[i].ID || a[i].Secret != b[i].Secret || !a[i].Expiration.Equal(b[i].Expiration) {
			return false
		}
	}
	return true
}

func TestBootstrapTokenSecret(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	sec := BootstrapTokenSecret(BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef", Expiration: exp}, "for node x",
		[]string{"authentication", "signing"}, []string{"system:bootstrappers:kubeadm:default-node-token"})
	if sec.Namespace != "kube-system" || sec.Name != "bootstrap-token-abcdef" || sec.Type != corev1.SecretType("bootstrap.kubernetes.io/token") {
		t.Fatalf("secret %s/%s of type %s", sec.Namespace, sec.Name, sec.Type)
	}
	want := map[string]string{
		"token-id": "abcdef", "token-secret": "0123456789abcdef", "expiration": "2030-01-02T02:04:05Z", "description": "for node x",
		"usage-bootstrap-authentication": "true", "usage-bootstrap-signing": "true",
		"auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
	}
	if len(sec.Data) != len(want) {
		t.Errorf("data keys %d, want %d", len(sec.Data), len(want))
	}
	for k, v := range want {
		if string(sec.Data[k]) != v {
			t.Errorf("data[%s] = %q, want %q", k, sec.Data[k], v)
		}
	}
	forever := BootstrapTokenSecret(BootstrapToken{ID: "abcdef", Secret: "0123456789abcdef"}, "", nil, nil)
	for _, k := range []string{"expiration", "description", "auth-extra-groups"} {
		if _, ok := forever.Data[k]; ok {
			t.Errorf("a token without %s has data[%s]", k, k)
		}
	}
}

func TestBootstrapTokenSecretExpiration(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	secret := func(exp string) *corev1.Secret {
		s := &corev1.Secret{Data: map[string][]byte{}}
		if exp != "" {
			s.Data["expiration"] = []byte(exp)
		}
		return s
	}
	cases := []struct {
		name    string
		exp     string
		ttl     time.Duration
		expired bool
	}{
		{"no expiration never expires", "", 0, false},
		{"an expiration ahead leaves the time until it", "2030-01-01T01:00:00Z", time.Hour, false},
		{"an expiration now has expired", "2030-01-01T00:00:00Z", 0, true},
		{"an expiration past has expired", "2029-12-31T23:00:00Z", 0, true},
		{"an expiration that does not parse counts as expired", "tomorrow", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ttl, expired := BootstrapTokenSecretExpiration(secret(tc.exp), now)
			if ttl != tc.ttl || expired != tc.expired {
				t.Fatalf("= %v, %v; want %v, %v", ttl, expired, tc.ttl, tc.expired)
			}
		})
	}
}
