package tokencleaner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controllermanager/tokencleaner"
	"skiff.dev/services/controlplanetest"
	"skiff.dev/services/internal/pki"
)

// TestTokenCleaner runs the token cleaner as system:kube-controller-manager against the
// real apiserver: bootstrap token Secrets in kube-system go once their expiration has
// passed, at that moment for one that expires while it runs; every other Secret stays.
func TestTokenCleaner(t *testing.T) {
	s := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(s.Config)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	now := time.Now().UTC()
	token := func(id string, expiration time.Time) *corev1.Secret {
		return pki.BootstrapTokenSecret(pki.BootstrapToken{ID: id, Secret: "0123456789abcdef", Expiration: expiration}, "", []string{"authentication"}, nil)
	}
	expiredElsewhere := token("elsewh", now.Add(-time.Minute))
	expiredElsewhere.Namespace = "default"
	opaque := token("opaque", now.Add(-time.Minute))
	opaque.Type = corev1.SecretTypeOpaque
	unparsable := token("unpars", time.Time{})
	unparsable.Data[pki.BootstrapTokenExpirationKey] = []byte("tomorrow")
	soon := token("soonnn", now.Add(3*time.Second).Truncate(time.Second).Add(time.Second))
	secrets := []struct {
		secret *corev1.Secret
		kept   bool
	}{
		{token("expird", now.Add(-time.Minute)), false},
		{unparsable, false},
		{soon, false},
		{token("livett", now.Add(time.Hour)), true},
		{token("foreve", time.Time{}), true},
		{opaque, true},
		{expiredElsewhere, true},
	}
	for _, sec := range secrets {
		if _, err := admin.CoreV1().Secrets(sec.secret.Namespace).Create(ctx, sec.secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	client := kubernetes.NewForConfigOrDie(s.ClientConfig(pki.ControllerManager.CommonName))
	factory := informers.NewSharedInformerFactory(client, 0)
	c := tokencleaner.New(factory.Core().V1().Secrets(), client, nil)
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		factory.Shutdown()
	})
	wg.Add(1)
	go func() { defer wg.Done(); c.Run(ctx) }()

	exists := func(sec *corev1.Secret) bool {
		_, err := admin.CoreV1().Secrets(sec.Namespace).Get(ctx, sec.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	gone := func(sec *corev1.Secret) error {
		return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return !exists(sec), nil
		})
	}
	for _, sec := range secrets[:2] {
		if err := gone(sec.secret); err != nil {
			t.Fatalf("%s/%s, expired, is still there", sec.secret.Namespace, sec.secret.Name)
		}
	}
	if err := gone(soon); err != nil {
		t.Fatal("a token that expired while the cleaner ran is still there")
	}
	// Polled every 20 ms, its deletion is seen within moments of happening.
	if exp, _ := time.Parse(time.RFC3339, string(soon.Data[pki.BootstrapTokenExpirationKey])); time.Now().Before(exp) {
		t.Fatalf("a token expiring at %v was deleted at %v", exp, time.Now())
	}
	for _, sec := range secrets {
		if sec.kept && !exists(sec.secret) {
			t.Errorf("%s/%s (type %s) was deleted", sec.secret.Namespace, sec.secret.Name, sec.secret.Type)
		}
	}
}
