package endpoints

import (
	"net"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// discovery serves the legacy discovery documents kubectl and client-go read to map
// kinds to resources: APIVersions at /api, APIGroupList at /apis, APIGroup at
// /apis/<group> and APIResourceList per group version. Mirrors
// k8s.io/apiserver/pkg/endpoints/discovery.
type discovery struct {
	core   *APIGroupVersion
	groups []*APIGroupVersion
}

func newDiscovery(core *APIGroupVersion, groups []*APIGroupVersion) *discovery {
	return &discovery{core: core, groups: groups}
}

func (d *discovery) serveAPIVersions(w http.ResponseWriter, r *http.Request) {
	host := r.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "80")
	}
	writeJSON(w, http.StatusOK, "application/json", &metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{d.core.GroupVersion.Version},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: host},
		},
	})
}

func apiGroup(gv *APIGroupVersion) metav1.APIGroup {
	version := metav1.GroupVersionForDiscovery{GroupVersion: gv.GroupVersion.String(), Version: gv.GroupVersion.Version}
	return metav1.APIGroup{
		TypeMeta:         metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:             gv.GroupVersion.Group,
		Versions:         []metav1.GroupVersionForDiscovery{version},
		PreferredVersion: version,
	}
}

func (d *discovery) serveAPIGroupList(w http.ResponseWriter, _ *http.Request) {
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, gv := range d.groups {
		g := apiGroup(gv)
		g.TypeMeta = metav1.TypeMeta{}
		list.Groups = append(list.Groups, g)
	}
	writeJSON(w, http.StatusOK, "application/json", list)
}

func (d *discovery) serveAPIGroup(gv *APIGroupVersion) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		g := apiGroup(gv)
		writeJSON(w, http.StatusOK, "application/json", &g)
	}
}

func (d *discovery) serveResourceList(gv *APIGroupVersion) http.HandlerFunc {
	list := gv.apiResourceList()
	return func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, "application/json", list)
	}
}
