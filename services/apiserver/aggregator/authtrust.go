package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"skiff.dev/services/apiserver/registry/rest"
)

// The ConfigMap that tells extension API servers how to authenticate what the apiserver
// proxies to them, and the request-header fields it uses. Kube's names.
const (
	AuthenticationConfigMapNamespace = metav1.NamespaceSystem
	AuthenticationConfigMapName      = "extension-apiserver-authentication"
	RemoteUserHeader                 = "X-Remote-User"
	RemoteGroupHeader                = "X-Remote-Group"
	RemoteExtraHeaderPrefix          = "X-Remote-Extra-"
)

// authTrustPeriod is how often the ConfigMap is checked (and put back, if changed or
// deleted), as kube's cluster-authentication-trust controller resyncs.
const authTrustPeriod = time.Minute

// authenticationData is the ConfigMap's data: the client CA (client-ca-file), the
// front-proxy CA (requestheader-client-ca-file), the names of the request-header fields
// and the client certificate names allowed to set them, each list a JSON array. Empty
// when no CA file is configured. Mirrors kube's ClusterAuthenticationInfo.
func (a *Aggregator) authenticationData() (map[string]string, error) {
	data := map[string]string{}
	if a.cfg.ClientCAFile != "" {
		ca, err := os.ReadFile(a.cfg.ClientCAFile)
		if err != nil {
			return nil, err
		}
		data["client-ca-file"] = string(ca)
	}
	if a.cfg.RequestHeaderCAFile != "" {
		ca, err := os.ReadFile(a.cfg.RequestHeaderCAFile)
		if err != nil {
			return nil, err
		}
		list := func(v []string) string {
			if v == nil {
				v = []string{}
			}
			b, _ := json.Marshal(v)
			return string(b)
		}
		data["requestheader-client-ca-file"] = string(ca)
		data["requestheader-username-headers"] = list([]string{RemoteUserHeader})
		data["requestheader-group-headers"] = list([]string{RemoteGroupHeader})
		data["requestheader-extra-headers-prefix"] = list([]string{RemoteExtraHeaderPrefix})
		data["requestheader-allowed-names"] = list(a.cfg.RequestHeaderAllowedNames)
	}
	return data, nil
}

// publishAuthentication keeps kube-system/extension-apiserver-authentication holding
// authenticationData until ctx ends: at start (once kube-system exists) and every
// minute. Mirrors kube-apiserver's cluster-authentication-trust controller.
func (a *Aggregator) publishAuthentication(ctx context.Context) {
	if a.cfg.ClientCAFile == "" && a.cfg.RequestHeaderCAFile == "" {
		return
	}
	retry := 100 * time.Millisecond
	for {
		next := authTrustPeriod
		if err := a.ensureAuthentication(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			slog.Debug("publishing the extension-apiserver-authentication ConfigMap; will retry", "err", err)
			next, retry = retry, min(2*retry, 10*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
	}
}

// errNoNamespace is ensureAuthentication's error until kube-system exists.
var errNoNamespace = errors.New("namespace kube-system does not exist yet")

func (a *Aggregator) ensureAuthentication(ctx context.Context) error {
	data, err := a.authenticationData()
	if err != nil {
		return err
	}
	namespaces := a.cfg.Stores.Store(corev1.Resource("namespaces"))
	configMaps := a.cfg.Stores.Store(corev1.Resource("configmaps"))
	if namespaces == nil || configMaps == nil {
		return errors.New("namespaces and configmaps must be served")
	}
	if _, err := namespaces.Get(ctx, "", AuthenticationConfigMapNamespace, &metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return errNoNamespace
		}
		return err
	}
	obj, err := configMaps.Get(ctx, AuthenticationConfigMapNamespace, AuthenticationConfigMapName, &metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: AuthenticationConfigMapNamespace, Name: AuthenticationConfigMapName}, Data: data}
		if _, err := configMaps.Create(ctx, AuthenticationConfigMapNamespace, cm, &metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	case err != nil:
		return err
	case maps.Equal(obj.(*corev1.ConfigMap).Data, data):
		return nil
	}
	_, _, err = configMaps.Update(ctx, AuthenticationConfigMapNamespace, AuthenticationConfigMapName, rest.UpdatedObjectFunc(func(_ context.Context, old runtime.Object) (runtime.Object, error) {
		cm := old.DeepCopyObject().(*corev1.ConfigMap)
		cm.Data = data
		return cm, nil
	}), &metav1.UpdateOptions{})
	return err
}
