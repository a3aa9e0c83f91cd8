package authorization_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"skiff.dev/services/apiserver/authorization"
)

// podsByNode is the authorizer's view of the cluster as a table: which node each pod
// is bound to and which service account it runs as ("namespace/pod" keys).
type podsByNode map[string]struct{ node, serviceAccount string }

func (p podsByNode) PodNodeName(_ context.Context, namespace, name, _ string) (string, bool, error) {
	pod, ok := p[namespace+"/"+name]
	return pod.node, ok, nil
}

func (podsByNode) CSRRequester(context.Context, string, string) (string, bool, error) {
	return "", false, nil
}

// NodePodsUse: the table says nothing about Secrets and ConfigMaps.
func (podsByNode) NodePodsUse(context.Context, string, string, func(*corev1.Pod) bool) (bool, error) {
	return false, nil
}

func (p podsByNode) NodeRunsServiceAccount(_ context.Context, namespace, name, node string) (bool, error) {
	if namespace == "broken" {
		return false, errors.New("storage unavailable")
	}
	for key, pod := range p {
		if strings.HasPrefix(key, namespace+"/") && pod.node == node && pod.serviceAccount == name {
			return true, nil
		}
	}
	return false, nil
}

func TestNodeMayCreateTokensForItsPodsServiceAccounts(t *testing.T) {
	z := authorization.New(podsByNode{
		"apps/web":   {node: "n1", serviceAccount: "builder"},
		"apps/batch": {node: "n2", serviceAccount: "runner"},
	}, noRBAC{})
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	for _, tc := range []struct {
		name      string
		namespace string
		sa        string
		verb      string
		sub       string
		want      authorizer.Decision
		wantErr   bool
	}{
		{name: "a token of a service account a pod on the node runs as", namespace: "apps", sa: "builder", verb: "create", sub: "token", want: authorizer.DecisionAllow},
		{name: "not a token of a service account only another node's pod runs as", namespace: "apps", sa: "runner", verb: "create", sub: "token", want: authorizer.DecisionNoOpinion},
		{name: "not a token of the same name in another namespace", namespace: "other", sa: "builder", verb: "create", sub: "token", want: authorizer.DecisionNoOpinion},
		{name: "not the service account itself", namespace: "apps", sa: "builder", verb: "get", want: authorizer.DecisionNoOpinion},
		{name: "not an update of the service account", namespace: "apps", sa: "builder", verb: "update", want: authorizer.DecisionNoOpinion},
		{name: "a lookup that fails is an error, not a denial", namespace: "broken", sa: "builder", verb: "create", sub: "token", want: authorizer.DecisionNoOpinion, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := z.Authorize(context.Background(), authorizer.AttributesRecord{
				User: n1, Verb: tc.verb, Namespace: tc.namespace, Resource: "serviceaccounts", Subresource: tc.sub,
				Name: tc.sa, ResourceRequest: true, APIVersion: "v1",
			})
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("decision %v err %v; want %v (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// noRBAC is an RBAC authorizer with no bindings: what the Node authorizer does not
// allow, nothing does.
type noRBAC struct{}

func (noRBAC) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "", nil
}

func (noRBAC) RulesFor(context.Context, user.Info, string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return nil, nil, false, nil
}

// nodePods is a lookup whose NodePodsUse sees the pods of each namespace and node
// ("namespace/node" keys).
type nodePods struct {
	podsByNode
	pods map[string][]*corev1.Pod
}

func (n nodePods) NodePodsUse(_ context.Context, namespace, node string, uses func(*corev1.Pod) bool) (bool, error) {
	for _, p := range n.pods[namespace+"/"+node] {
		if uses(p) {
			return true, nil
		}
	}
	return false, nil
}

func TestNodeReadsTheConfigMapsItsPodsUseByNameOnly(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}}}}}
	z := authorization.New(nodePods{pods: map[string][]*corev1.Pod{"apps/n1": {pod}}}, noRBAC{})
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	for _, tc := range []struct {
		name, verb, objectName, fieldSelector string
		want                                  authorizer.Decision
	}{
		{name: "get of one its pod uses", verb: "get", objectName: "settings", want: authorizer.DecisionAllow},
		{name: "watch of that one name", verb: "watch", fieldSelector: "metadata.name=settings", want: authorizer.DecisionAllow},
		{name: "list of that one name", verb: "list", fieldSelector: "metadata.name=settings", want: authorizer.DecisionAllow},
		{name: "not a get of another", verb: "get", objectName: "other", want: authorizer.DecisionNoOpinion},
		{name: "not a watch of another name", verb: "watch", fieldSelector: "metadata.name=other", want: authorizer.DecisionNoOpinion},
		{name: "not a list of all", verb: "list", want: authorizer.DecisionNoOpinion},
		{name: "not a watch by a name inequality", verb: "watch", fieldSelector: "metadata.name!=other", want: authorizer.DecisionNoOpinion},
		{name: "not an update", verb: "update", objectName: "settings", want: authorizer.DecisionNoOpinion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requirements, err := authorization.ParseFieldSelector(tc.fieldSelector)
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := z.Authorize(context.Background(), authorizer.AttributesRecord{
				User: n1, Verb: tc.verb, Namespace: "apps", Resource: "configmaps", Name: tc.objectName,
				FieldSelectorRequirements: requirements, ResourceRequest: true, APIVersion: "v1",
			})
			if got != tc.want || err != nil {
				t.Fatalf("decision %v err %v; want %v", got, err, tc.want)
			}
		})
	}
}

func (podsByNode) PersistentVolumeClaimRef(context.Context, string) (string, string, bool, error) {
	return "", "", false, nil
}

func (p podsByNode) VolumeAttachmentNodeName(_ context.Context, name, _ string) (string, bool, error) {
	if node, ok := strings.CutPrefix(name, "va-on-"); ok {
		return node, true, nil
	}
	return "", false, nil
}

// withVolumes is nodePods whose PersistentVolumes name the claims given ("namespace/claim").
type withVolumes struct {
	nodePods
	claimRefs map[string]string
}

func (w withVolumes) PersistentVolumeClaimRef(_ context.Context, name string) (string, string, bool, error) {
	ref, ok := w.claimRefs[name]
	namespace, claim, _ := strings.Cut(ref, "/")
	return namespace, claim, ok, nil
}

func TestNodeGetsTheClaimsAndVolumesItsPodsUse(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	z := authorization.New(withVolumes{nodePods: nodePods{pods: map[string][]*corev1.Pod{"apps/n1": {pod}}},
		claimRefs: map[string]string{"pv-data": "apps/data", "pv-other": "apps/other"}}, noRBAC{})
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	for _, tc := range []struct {
		verb, namespace, resource, name string
		want                            authorizer.Decision
	}{
		{"get", "apps", "persistentvolumeclaims", "data", authorizer.DecisionAllow},
		{"get", "apps", "persistentvolumeclaims", "other", authorizer.DecisionNoOpinion},
		{"list", "apps", "persistentvolumeclaims", "", authorizer.DecisionNoOpinion},
		{"update", "apps", "persistentvolumeclaims", "data", authorizer.DecisionNoOpinion},
		{"get", "", "persistentvolumes", "pv-data", authorizer.DecisionAllow},
		{"get", "", "persistentvolumes", "pv-other", authorizer.DecisionNoOpinion},
		{"get", "", "persistentvolumes", "pv-unbound", authorizer.DecisionNoOpinion},
	} {
		got, _, err := z.Authorize(context.Background(), authorizer.AttributesRecord{
			User: n1, Verb: tc.verb, Namespace: tc.namespace, Resource: tc.resource, Name: tc.name, ResourceRequest: true, APIVersion: "v1",
		})
		if got != tc.want || err != nil {
			t.Errorf("%s %s %q: decision %v err %v; want %v", tc.verb, tc.resource, tc.name, got, err, tc.want)
		}
	}
}

func TestNodeMayReadRuntimeClasses(t *testing.T) {
	z := authorization.New(podsByNode{}, noRBAC{})
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	for verb, want := range map[string]authorizer.Decision{
		"get": authorizer.DecisionAllow, "list": authorizer.DecisionAllow, "watch": authorizer.DecisionAllow,
		"create": authorizer.DecisionNoOpinion, "update": authorizer.DecisionNoOpinion, "delete": authorizer.DecisionNoOpinion,
	} {
		got, _, err := z.Authorize(context.Background(), authorizer.AttributesRecord{
			User: n1, Verb: verb, APIGroup: "node.k8s.io", Resource: "runtimeclasses", Name: "gvisor", ResourceRequest: true,
		})
		if err != nil || got != want {
			t.Errorf("%s runtimeclasses: got %v %v, want %v", verb, got, err, want)
		}
	}
}

// TestNodeCSIObjects pins kube's Node authorizer rules for the CSI objects: a node reads
// CSIDrivers, writes only the CSINode named after it (create is left to NodeRestriction,
// which sees the name), and gets only the VolumeAttachments of its own node.
func TestNodeCSIObjects(t *testing.T) {
	z := authorization.New(podsByNode{}, noRBAC{})
	n1 := &user.DefaultInfo{Name: "system:node:n1", Groups: []string{"system:nodes", "system:authenticated"}}
	for _, tc := range []struct {
		verb, resource, name, sub string
		want                      authorizer.Decision
		reason                    string
	}{
		{"get", "csidrivers", "csi.example.com", "", authorizer.DecisionAllow, ""},
		{"list", "csidrivers", "", "", authorizer.DecisionAllow, ""},
		{"watch", "csidrivers", "", "", authorizer.DecisionAllow, ""},
		{"create", "csidrivers", "", "", authorizer.DecisionNoOpinion, ""},
		{"delete", "csidrivers", "csi.example.com", "", authorizer.DecisionNoOpinion, ""},
		{"create", "csinodes", "", "", authorizer.DecisionAllow, ""},
		{"get", "csinodes", "n1", "", authorizer.DecisionAllow, ""},
		{"update", "csinodes", "n1", "", authorizer.DecisionAllow, ""},
		{"patch", "csinodes", "n1", "", authorizer.DecisionAllow, ""},
		{"delete", "csinodes", "n1", "", authorizer.DecisionAllow, ""},
		{"get", "csinodes", "n2", "", authorizer.DecisionNoOpinion, "can only access CSINode with the same name as the requesting node"},
		{"update", "csinodes", "n2", "", authorizer.DecisionNoOpinion, "can only access CSINode with the same name as the requesting node"},
		{"delete", "csinodes", "n2", "", authorizer.DecisionNoOpinion, "can only access CSINode with the same name as the requesting node"},
		{"list", "csinodes", "", "", authorizer.DecisionNoOpinion, "can only get, create, update, patch, or delete a CSINode"},
		{"get", "volumeattachments", "va-on-n1", "", authorizer.DecisionAllow, ""},
		{"get", "volumeattachments", "va-on-n2", "", authorizer.DecisionNoOpinion, "no relationship found between node 'n1' and this object"},
		{"get", "volumeattachments", "missing", "", authorizer.DecisionNoOpinion, "no relationship found between node 'n1' and this object"},
		{"list", "volumeattachments", "", "", authorizer.DecisionNoOpinion, "can only get individual resources of this type"},
		{"update", "volumeattachments", "va-on-n1", "status", authorizer.DecisionNoOpinion, "can only get individual resources of this type"},
		{"get", "volumeattachments", "va-on-n1", "status", authorizer.DecisionNoOpinion, "cannot get subresource"},
		{"list", "csistoragecapacities", "", "", authorizer.DecisionNoOpinion, ""},
	} {
		got, reason, err := z.Authorize(context.Background(), authorizer.AttributesRecord{
			User: n1, Verb: tc.verb, APIGroup: "storage.k8s.io", Resource: tc.resource, Name: tc.name, Subresource: tc.sub, ResourceRequest: true,
		})
		if err != nil || got != tc.want || reason != tc.reason {
			t.Errorf("%s %s %q %s: got %v %q %v, want %v %q", tc.verb, tc.resource, tc.name, tc.sub, got, reason, err, tc.want, tc.reason)
		}
	}
}
