// Package credentialprovider turns a pod's imagePullSecrets into the
// registry credentials of one image, passed to the runtime as CRI
// AuthConfig. Mirrors kubelet's pkg/credentialprovider (BasicDockerKeyring
// and secrets.MakeDockerKeyring), for kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg Secrets.
package credentialprovider

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dockerHub is the registry an image without a registry host comes from.
const dockerHub = "docker.io"

// entry is one registry's credentials from a docker config.
type entry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// Keyring holds registry credentials keyed by registry host and optional
// path prefix ("registry.example.com", "*.example.com/team").
type Keyring struct {
	keys  []string
	creds map[string][]*runtimeapi.AuthConfig
}

// MakeKeyring builds a Keyring from pull secrets; a Secret of another type,
// or whose data does not parse, is an error naming it.
func MakeKeyring(secrets []v1.Secret) (*Keyring, error) {
	k := &Keyring{creds: map[string][]*runtimeapi.AuthConfig{}}
	for _, s := range secrets {
		var auths map[string]entry
		switch s.Type {
		case v1.SecretTypeDockerConfigJson:
			var cfg struct {
				Auths map[string]entry `json:"auths"`
			}
			if err := json.Unmarshal(s.Data[v1.DockerConfigJsonKey], &cfg); err != nil {
				return nil, fmt.Errorf("pull secret %s: %s: %w", s.Name, v1.DockerConfigJsonKey, err)
			}
			auths = cfg.Auths
		case v1.SecretTypeDockercfg:
			if err := json.Unmarshal(s.Data[v1.DockerConfigKey], &auths); err != nil {
				return nil, fmt.Errorf("pull secret %s: %s: %w", s.Name, v1.DockerConfigKey, err)
			}
		default:
			return nil, fmt.Errorf("pull secret %s has type %q, want %q or %q", s.Name, s.Type, v1.SecretTypeDockerConfigJson, v1.SecretTypeDockercfg)
		}
		for server, e := range auths {
			auth, err := e.authConfig(server)
			if err != nil {
				return nil, fmt.Errorf("pull secret %s: %w", s.Name, err)
			}
			key := parseKey(server)
			if _, ok := k.creds[key]; !ok {
				k.keys = append(k.keys, key)
			}
			k.creds[key] = append(k.creds[key], auth)
		}
	}
	// Longest (most specific) keys first, as kube's keyring orders them.
	sort.SliceStable(k.keys, func(i, j int) bool { return len(k.keys[i]) > len(k.keys[j]) })
	return k, nil
}

func (e entry) authConfig(server string) (*runtimeapi.AuthConfig, error) {
	a := &runtimeapi.AuthConfig{Username: e.Username, Password: e.Password, ServerAddress: server,
		IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
	if e.Auth != "" {
		raw, err := base64.StdEncoding.DecodeString(e.Auth)
		if err != nil {
			return nil, fmt.Errorf("registry %s: auth is not base64: %w", server, err)
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return nil, fmt.Errorf("registry %s: auth is not user:password", server)
		}
		a.Username, a.Password = user, pass
	}
	return a, nil
}

// parseKey normalises a docker config key to host[/path]: no scheme, no
// trailing slash, no Docker Hub "/v1" or "/v2" suffix, Docker Hub's aliases
// as docker.io.
func parseKey(server string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(server, "https://"), "http://")
	s = strings.TrimSuffix(s, "/")
	host, rest, _ := strings.Cut(s, "/")
	if rest == "v1" || rest == "v2" {
		rest = ""
	}
	switch host {
	case "index.docker.io", "registry-1.docker.io":
		host = dockerHub
	}
	if rest == "" {
		return host
	}
	return host + "/" + rest
}

// Lookup returns the credentials for image, most specific key first; none
// when no key matches (the pull is then anonymous).
func (k *Keyring) Lookup(image string) []*runtimeapi.AuthConfig {
	host, repo := splitImage(image)
	var out []*runtimeapi.AuthConfig
	for _, key := range k.keys {
		keyHost, keyPath, _ := strings.Cut(key, "/")
		if ok, _ := path.Match(keyHost, host); !ok {
			continue
		}
		if keyPath != "" && repo != keyPath && !strings.HasPrefix(repo, keyPath+"/") {
			continue
		}
		out = append(out, k.creds[key]...)
	}
	return out
}

// splitImage returns an image reference's registry host and repository
// path, without tag or digest: "nginx" is docker.io, library/nginx.
func splitImage(image string) (host, repo string) {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	first, rest, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		host, repo = dockerHub, image
		if !found {
			repo = "library/" + image
		}
	} else {
		host, repo = first, rest
	}
	if i := strings.LastIndex(repo, ":"); i >= 0 {
		repo = repo[:i]
	}
	if host == "index.docker.io" || host == "registry-1.docker.io" {
		host = dockerHub
	}
	return host, repo
}
