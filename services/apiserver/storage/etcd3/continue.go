package etcd3

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"skiff.dev/services/apiserver/storage"
)

// continueTokenVersion is the "v" of every token, the value Kubernetes uses.
const continueTokenVersion = "meta.k8s.io/v1"

// continueToken is the JSON inside a continue token, the same shape as Kubernetes'
// (k8s.io/apiserver/pkg/storage/continue.go): the revision the first page was read at
// and the key the next page starts at, relative to the collection key so a token can
// never reach outside the collection it was issued for.
type continueToken struct {
	APIVersion      string `json:"v"`
	ResourceVersion int64  `json:"rv"`
	StartKey        string `json:"start"`
}

// inconsistentContinueRev is the revision of the token a 410 for an expired continue
// token carries: continue at the latest revision. Kubernetes uses -1 rather than 0 so
// that it tells apart from a token without a revision.
const inconsistentContinueRev = -1

func encodeContinue(rev int64, start string) string {
	// Marshalling a struct of a string, an int and a string cannot fail.
	data, _ := json.Marshal(continueToken{APIVersion: continueTokenVersion, ResourceVersion: rev, StartKey: start})
	return base64.RawURLEncoding.EncodeToString(data)
}

func decodeContinue(token string) (rev int64, start string, err error) {
	data, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %v", storage.ErrInvalidContinue, err)
	}
	var t continueToken
	if err := json.Unmarshal(data, &t); err != nil {
		return 0, "", fmt.Errorf("%w: %v", storage.ErrInvalidContinue, err)
	}
	if t.APIVersion != continueTokenVersion {
		return 0, "", fmt.Errorf("%w: unknown version %q", storage.ErrInvalidContinue, t.APIVersion)
	}
	if t.ResourceVersion <= 0 && t.ResourceVersion != inconsistentContinueRev {
		return 0, "", fmt.Errorf("%w: no resource version", storage.ErrInvalidContinue)
	}
	return t.ResourceVersion, t.StartKey, nil
}
