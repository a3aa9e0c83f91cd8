package etcd3

import (
	"errors"
	"math"
	"strconv"
	"testing"
	"unicode/utf8"

	"skiff.dev/services/apiserver/storage"
)

// FuzzDecodeContinue feeds arbitrary continue tokens (a client sends them back verbatim,
// so they are untrusted) to the decoder: an error wrapping storage.ErrInvalidContinue
// (400), or a positive revision (or -1, "the latest", the token of a 410 for an expired
// one) and a start key that encode back to a token decoding to the same.
func FuzzDecodeContinue(f *testing.F) {
	f.Add(encodeContinue(42, "default/nginx\x00"))
	f.Add(encodeContinue(1, ""))
	f.Add("eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6LTEsInN0YXJ0IjoiIn0")
	f.Add("not base64 !")
	f.Add("e30")
	f.Fuzz(func(t *testing.T, token string) {
		rev, start, err := decodeContinue(token)
		if err != nil {
			if !errors.Is(err, storage.ErrInvalidContinue) {
				t.Fatalf("%q: error does not wrap ErrInvalidContinue: %v", token, err)
			}
			return
		}
		if rev <= 0 && rev != inconsistentContinueRev {
			t.Fatalf("%q: accepted with revision %d", token, rev)
		}
		rev2, start2, err := decodeContinue(encodeContinue(rev, start))
		if err != nil || rev2 != rev || start2 != start {
			t.Fatalf("%q: round trip gave %d %q %v, want %d %q", token, rev2, start2, err, rev, start)
		}
	})
}

// FuzzContinueRoundTrip: every token skiff issues decodes to what it encoded.
func FuzzContinueRoundTrip(f *testing.F) {
	f.Add(int64(7), "kube-system/coredns\x00")
	f.Add(int64(1<<62), "\xff\xfe")
	f.Fuzz(func(t *testing.T, rev int64, start string) {
		if rev <= 0 {
			return
		}
		gotRev, gotStart, err := decodeContinue(encodeContinue(rev, start))
		if err != nil {
			t.Fatalf("decode(encode(%d, %q)): %v", rev, start, err)
		}
		// JSON replaces invalid UTF-8 with U+FFFD; skiff's start keys are object
		// names (valid UTF-8), for which the round trip is exact.
		if gotRev != rev || (gotStart != start && validUTF8(start)) {
			t.Fatalf("decode(encode(%d, %q)) = %d, %q", rev, start, gotRev, gotStart)
		}
	})
}

func validUTF8(s string) bool { return utf8.ValidString(s) }

// FuzzParseResourceVersion: a resourceVersion (list, watch and get query parameter) is ""
// (latest) or an unsigned decimal, else ErrInvalidResourceVersion (400).
func FuzzParseResourceVersion(f *testing.F) {
	f.Add("")
	f.Add("0")
	f.Add("12345")
	f.Add("+5")
	f.Add("-1")
	f.Add("18446744073709551616")
	f.Fuzz(func(t *testing.T, rv string) {
		rev, err := parseResourceVersion(rv)
		want, perr := strconv.ParseUint(rv, 10, 64)
		switch {
		case rv == "":
			if err != nil || rev != 0 {
				t.Fatalf(`"": %d, %v`, rev, err)
			}
		case perr != nil:
			if !errors.Is(err, storage.ErrInvalidResourceVersion) {
				t.Fatalf("%q: %d, %v; want ErrInvalidResourceVersion", rv, rev, err)
			}
		case err != nil || rev < 0 || (want <= math.MaxInt64 && uint64(rev) != want):
			t.Fatalf("%q: %d, %v; want %d", rv, rev, err, want)
		}
	})
}
