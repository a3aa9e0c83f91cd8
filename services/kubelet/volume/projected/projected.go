// Package projected is the projected volume plugin: configMap, secret,
// downwardAPI and serviceAccountToken sources in one directory on a tmpfs,
// written atomically and refreshed while the pod lives (a token before 80%
// of its lifetime has passed). clusterTrustBundle and podCertificate sources
// are refused. Mirrors k8s.io/kubernetes pkg/volume/projected.
package projected

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"skiff.dev/services/kubelet/volume"
	"skiff.dev/services/kubelet/volume/atomicwriter"
	"skiff.dev/services/kubelet/volume/configmap"
	"skiff.dev/services/kubelet/volume/downwardapi"
	"skiff.dev/services/kubelet/volume/secret"
)

// PluginName is kube's name of the plugin.
const PluginName = "kubernetes.io/projected"

// defaultTokenExpirationSeconds is what the API defaults
// serviceAccountToken.expirationSeconds to.
const defaultTokenExpirationSeconds = 3600

type plugin struct {
	host volume.Host
}

// NewPlugin returns the projected plugin.
func NewPlugin(host volume.Host) volume.Plugin { return &plugin{host: host} }

func (p *plugin) GetPluginName() string { return PluginName }

func (p *plugin) CanSupport(spec *v1.Volume) bool { return spec.Projected != nil }

// RequiresRemount: sources change and tokens expire.
func (p *plugin) RequiresRemount() bool { return true }

// NewMounter refuses sources this kubelet cannot project.
func (p *plugin) NewMounter(spec *v1.Volume, pod *v1.Pod) (volume.Mounter, error) {
	for i, s := range spec.Projected.Sources {
		switch {
		case s.ConfigMap != nil, s.Secret != nil, s.DownwardAPI != nil, s.ServiceAccountToken != nil:
		case s.ClusterTrustBundle != nil:
			return nil, fmt.Errorf("projected volume %q: clusterTrustBundle sources are not supported by this kubelet", spec.Name)
		default:
			return nil, fmt.Errorf("projected volume %q: source %d is of a kind this kubelet does not support", spec.Name, i)
		}
	}
	return &mounter{
		host:   p.host,
		source: *spec.Projected,
		pod:    pod,
		path:   p.host.GetPodVolumeDir(pod.UID, PluginName, spec.Name),
	}, nil
}

func (p *plugin) NewUnmounter(volName string, podUID types.UID) (volume.Unmounter, error) {
	return unmounter{path: p.host.GetPodVolumeDir(podUID, PluginName, volName), mounter: p.host.GetMounter()}, nil
}

type mounter struct {
	host   volume.Host
	source v1.ProjectedVolumeSource
	pod    *v1.Pod
	path   string
}

func (m *mounter) GetPath() string { return m.path }

// GetAttributes: API data volumes are read-only in every container.
func (m *mounter) GetAttributes() volume.Attributes {
	return volume.Attributes{ReadOnly: true, Managed: true}
}

func (m *mounter) SetUp(ctx context.Context) error {
	payload, err := m.collectData(ctx)
	if err != nil {
		return err
	}
	if err := m.host.GetMounter().SetUpTmpfs(m.path, 0); err != nil {
		return err
	}
	if err := atomicwriter.New(m.path).Write(payload); err != nil {
		return fmt.Errorf("write projected volume %s: %w", m.path, err)
	}
	return nil
}

// collectData merges every source's files; later sources win on a shared
// path. Mirrors projected's collectData.
func (m *mounter) collectData(ctx context.Context) (map[string]atomicwriter.FileProjection, error) {
	mode := int32(v1.ProjectedVolumeSourceDefaultMode)
	if m.source.DefaultMode != nil {
		mode = *m.source.DefaultMode
	}
	ns := m.pod.Namespace
	payload := map[string]atomicwriter.FileProjection{}
	var errs []error
	for _, s := range m.source.Sources {
		switch {
		case s.ConfigMap != nil:
			optional := s.ConfigMap.Optional != nil && *s.ConfigMap.Optional
			cm, err := m.host.GetConfigMap(ctx, ns, s.ConfigMap.Name)
			switch {
			case apierrors.IsNotFound(err) && optional:
				continue
			case err != nil:
				errs = append(errs, err)
				continue
			}
			files, err := configmap.MakePayload(s.ConfigMap.Items, cm, &mode, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			maps.Copy(payload, files)
		case s.Secret != nil:
			optional := s.Secret.Optional != nil && *s.Secret.Optional
			sec, err := m.host.GetSecret(ctx, ns, s.Secret.Name)
			switch {
			case apierrors.IsNotFound(err) && optional:
				continue
			case err != nil:
				errs = append(errs, err)
				continue
			}
			files, err := secret.MakePayload(s.Secret.Items, sec, &mode, optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			maps.Copy(payload, files)
		case s.DownwardAPI != nil:
			files, err := downwardapi.CollectData(s.DownwardAPI.Items, &mode, m.pod, m.host.GetNodeAllocatable())
			if err != nil {
				errs = append(errs, err)
				continue
			}
			maps.Copy(payload, files)
		case s.ServiceAccountToken != nil:
			token, err := m.token(ctx, s.ServiceAccountToken)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			tokenMode := mode
			if sc := m.pod.Spec.SecurityContext; sc != nil && sc.FSGroup != nil {
				// Readable by the owner and, once re-grouped, the fsGroup:
				// never by everyone.
				tokenMode = 0o600
			}
			payload[filepath.Clean(s.ServiceAccountToken.Path)] = atomicwriter.FileProjection{Data: []byte(token), Mode: tokenMode}
		}
	}
	return payload, errors.Join(errs...)
}

// token requests a token of the pod's service account, bound to the pod, for
// the source's audience (none: the apiserver's) and lifetime.
func (m *mounter) token(ctx context.Context, src *v1.ServiceAccountTokenProjection) (string, error) {
	sa := m.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	expiration := src.ExpirationSeconds
	if expiration == nil {
		e := int64(defaultTokenExpirationSeconds)
		expiration = &e
	}
	var audiences []string
	if src.Audience != "" {
		audiences = []string{src.Audience}
	}
	tr, err := m.host.GetServiceAccountToken(ctx, m.pod.Namespace, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: expiration,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1", Kind: "Pod", Name: m.pod.Name, UID: m.pod.UID,
			},
		},
	})
	if err != nil {
		return "", fmt.Errorf("fetch token for service account %s/%s: %w", m.pod.Namespace, sa, err)
	}
	return tr.Status.Token, nil
}

type unmounter struct {
	path    string
	mounter volume.MountInterface
}

func (u unmounter) TearDown() error { return u.mounter.TearDownDir(u.path) }
