package authentication_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/authentication"
	"skiff.dev/services/apiserver/registry"
	"skiff.dev/services/apiserver/registry/core/pod"
	"skiff.dev/services/apiserver/registry/core/secret"
	saregistry "skiff.dev/services/apiserver/registry/core/serviceaccount"
	"skiff.dev/services/apiserver/scheme"
	"skiff.dev/services/apiserver/serviceaccount"
	"skiff.dev/services/apiserver/storage/etcd3"
	"skiff.dev/services/internal/embedetcd"
)

// etcdClient talks to the real embedded etcd the package's tests share.
var etcdClient *clientv3.Client

func TestMain(m *testing.M) {
	os.Exit(embedetcd.RunTests(m, &etcdClient))
}

func newStore(d registry.Descriptor) *registry.Store {
	return d.NewStore(etcd3.New(etcdClient, scheme.StorageCodec, d.NewFunc))
}

func bearer(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "https://apiserver/api", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func TestServiceAccountTokens(t *testing.T) {
	ctx := context.Background()
	pods := newStore(pod.NewDescriptor(nil))
	secrets := newStore(secret.Descriptor)
	serviceAccounts := newStore(saregistry.NewDescriptor(saregistry.TokenConfig{}))
	mustCreate := func(store *registry.Store, obj runtime.Object) runtime.Object {
		t.Helper()
		out, err := store.Create(ctx, "authn", obj, &metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mustDelete := func(store *registry.Store, name string) {
		t.Helper()
		if _, _, err := store.Delete(ctx, "authn", name, &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}
	newPod := func(name string) *corev1.Pod {
		return mustCreate(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}).(*corev1.Pod)
	}
	builder := mustCreate(serviceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "builder"}}).(*corev1.ServiceAccount)
	doomed := mustCreate(serviceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}).(*corev1.ServiceAccount)
	web, gone, recreated := newPod("web"), newPod("gone"), newPod("recreated")
	terminating, draining := newPod("terminating"), newPod("draining")
	cred := mustCreate(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cred"}}).(*corev1.Secret)
	lostCred := mustCreate(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "lost"}}).(*corev1.Secret)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "node-uid"}}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := serviceaccount.NewSigner(serviceaccount.DefaultIssuer, key)
	now := time.Now()
	sign := func(sa *corev1.ServiceAccount, b serviceaccount.Binding, issued time.Time) string {
		tok, err := signer.Sign(serviceaccount.NewClaims(sa, b, []string{serviceaccount.DefaultIssuer}, issued, time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tokens := map[string]string{
		"plain":       sign(builder, serviceaccount.Binding{}, now),
		"pod":         sign(builder, serviceaccount.Binding{Pod: web, Node: node}, now),
		"gone":        sign(builder, serviceaccount.Binding{Pod: gone}, now),
		"recreated":   sign(builder, serviceaccount.Binding{Pod: recreated}, now),
		"terminating": sign(builder, serviceaccount.Binding{Pod: terminating}, now),
		"draining":    sign(builder, serviceaccount.Binding{Pod: draining}, now),
		"secret":      sign(builder, serviceaccount.Binding{Secret: cred}, now),
		"lostSecret":  sign(builder, serviceaccount.Binding{Secret: lostCred}, now),
		"doomed":      sign(doomed, serviceaccount.Binding{}, now),
		"expired":     sign(builder, serviceaccount.Binding{}, now.Add(-2*time.Hour)),
	}

	// What happens to the objects after the tokens were issued.
	mustDelete(pods, "gone")
	mustDelete(pods, "recreated")
	newPod("recreated")
	mustDelete(secrets, "lost")
	mustDelete(serviceAccounts, "doomed")
	mustCreate(serviceAccounts, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}})
	markDeleted := func(name string, at time.Time) {
		t.Helper()
		key, _ := pods.KeyFunc("authn", name)
		if err := pods.Storage.GuaranteedUpdate(ctx, key, &corev1.Pod{}, nil, func(existing runtime.Object) (runtime.Object, error) {
			p := existing.(*corev1.Pod)
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(at)), ptr.To[int64](30)
			return p, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	markDeleted("terminating", now.Add(-2*time.Minute))
	markDeleted("draining", now.Add(-10*time.Second))

	authn := &authentication.ServiceAccountTokens{
		Verifier:        serviceaccount.NewVerifier(serviceaccount.DefaultIssuer, []string{serviceaccount.DefaultIssuer}, []crypto.PublicKey{key.Public()}),
		ServiceAccounts: serviceAccounts, Pods: pods, Secrets: secrets,
		Now: func() time.Time { return now },
	}
	wantGroups := []string{"system:serviceaccounts", "system:serviceaccounts:authn", "system:authenticated"}
	for _, tc := range []struct {
		name    string
		token   string
		refused string // "" accepts
		extra   map[string][]string
		noCred  bool
	}{
		{name: "a token of an existing service account is its user", token: tokens["plain"]},
		{name: "a pod-bound token carries the pod and its node", token: tokens["pod"], extra: map[string][]string{
			"authentication.kubernetes.io/pod-name": {"web"}, "authentication.kubernetes.io/pod-uid": {string(web.UID)},
			"authentication.kubernetes.io/node-name": {"n1"}, "authentication.kubernetes.io/node-uid": {"node-uid"},
		}},
		{name: "a token bound to a deleted pod is refused", token: tokens["gone"], refused: "pod authn/gone has been deleted"},
		{name: "a token bound to a pod that was recreated is refused", token: tokens["recreated"], refused: "pod UID"},
		{name: "a token bound to a pod deleted over a minute ago is refused", token: tokens["terminating"], refused: "is marked for deletion"},
		{name: "a token bound to a pod in its first minute of deletion still works", token: tokens["draining"]},
		{name: "a secret-bound token works while the secret exists", token: tokens["secret"]},
		{name: "a token bound to a deleted secret is refused", token: tokens["lostSecret"], refused: "secret authn/lost has been deleted"},
		{name: "a token of a recreated service account is refused", token: tokens["doomed"], refused: "service account UID"},
		{name: "an expired token is refused", token: tokens["expired"], refused: "expired"},
		{name: "a bootstrap token is left to the other authenticators", token: "abcdef.0123456789abcdef", noCred: true},
		{name: "a request without a token is left to the other authenticators", noCred: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, ok, err := authn.AuthenticateRequest(bearer(tc.token))
			switch {
			case tc.noCred:
				if ok || err != nil {
					t.Fatalf("ok %v err %v; want neither", ok, err)
				}
			case tc.refused != "":
				if ok || !errors.Is(err, authentication.ErrInvalidToken) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("ok %v err %v; want ErrInvalidToken saying %q", ok, err, tc.refused)
				}
			default:
				if !ok || err != nil {
					t.Fatalf("refused: %v", err)
				}
				if info.GetName() != "system:serviceaccount:authn:builder" || info.GetUID() != string(builder.UID) || !slices.Equal(info.GetGroups(), wantGroups) {
					t.Fatalf("user %q uid %q groups %v", info.GetName(), info.GetUID(), info.GetGroups())
				}
				extra := info.GetExtra()
				if id := extra["authentication.kubernetes.io/credential-id"]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") {
					t.Errorf("credential-id %v", id)
				}
				for k, v := range tc.extra {
					if !slices.Equal(extra[k], v) {
						t.Errorf("extra %s = %v, want %v", k, extra[k], v)
					}
				}
			}
		})
	}
}
