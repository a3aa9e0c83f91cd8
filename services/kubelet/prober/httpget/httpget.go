// Package httpget builds the GET request of an httpGet probe or lifecycle
// hook from its HTTPGetAction: scheme, host, port (by number or by the
// container's port name), path and headers, with kube's User-Agent. Mirrors
// k8s.io/kubernetes/pkg/probe/http's request building.
package httpget

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// UserAgent returns "<component>/<major>.<minor>" for a version such as
// "v1.32.4", as kube's probes and hooks identify themselves.
func UserAgent(component, version string) string {
	v := strings.TrimPrefix(version, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) >= 2 {
		v = parts[0] + "." + parts[1]
	}
	return fmt.Sprintf("%s/%s", component, v)
}

// NewRequest builds the request of an httpGet probe or lifecycle hook: scheme
// (default HTTP), host (default podIP), port (number or the container's
// named port), path and headers, with kube's User-Agent "kube-probe/<major>.<minor>"
// and Accept "*/*" unless the headers set them. Mirrors
// pkg/probe/http.NewRequestForHTTPGetAction.
func NewRequest(ctx context.Context, action *v1.HTTPGetAction, c *v1.Container, podIP, userAgent string) (*http.Request, error) {
	scheme := strings.ToLower(string(action.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := action.Host
	if host == "" {
		host = podIP
	}
	port, err := ResolveContainerPort(action.Port, c)
	if err != nil {
		return nil, err
	}
	path := action.Path
	u := formatURL(scheme, host, port, path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, h := range action.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", userAgent)
	}
	if _, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	} else if req.Header.Get("Accept") == "" {
		req.Header.Del("Accept")
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	return req, nil
}

// formatURL joins scheme, host, port and path (with its query) into a URL.
func formatURL(scheme, host string, port int, path string) *url.URL {
	u, err := url.Parse(path)
	if err != nil {
		u = &url.URL{Path: path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u
}

// ResolveContainerPort returns the port a probe or lifecycle hook names: a number, or
// the name of one of the container's ports; it must be in 1..65535. Mirrors
// probe.ResolveContainerPort.
func ResolveContainerPort(param intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	switch param.Type {
	case intstr.Int:
		port = param.IntValue()
	case intstr.String:
		for _, p := range c.Ports {
			if p.Name == param.StrVal {
				port = int(p.ContainerPort)
			}
		}
		if port == -1 {
			n, err := strconv.Atoi(param.StrVal)
			if err != nil {
				return -1, fmt.Errorf("couldn't find port: %v in %v", param, c.Name)
			}
			port = n
		}
	}
	if port <= 0 || port >= 65536 {
		return port, fmt.Errorf("invalid port number: %v", port)
	}
	return port, nil
}
