package serviceaccount_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"skiff.dev/services/apiserver/serviceaccount"
	"skiff.dev/services/controlplanetest"
)

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// protobuf is cfg speaking protobuf, as kubectl's typed clients do.
func protobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/vnd.kubernetes.protobuf"
	return c
}

// waitForServiceAccount polls until namespace/name exists and returns it.
func waitForServiceAccount(t *testing.T, client kubernetes.Interface, namespace, name string) *corev1.ServiceAccount {
	t.Helper()
	var sa *corev1.ServiceAccount
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		sa = got
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("service account %s/%s: %v", namespace, name, err)
	}
	return sa
}

func createNamespace(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func whoami(t *testing.T, s *controlplanetest.Server, token string) (*authenticationv1.UserInfo, error) {
	t.Helper()
	review, err := clientFor(t, s.TokenConfig(token)).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &review.Status.UserInfo, nil
}

func TestEveryNamespaceGetsItsDefaultServiceAccount(t *testing.T) {
	s := controlplanetest.StartServer(t)
	client := clientFor(t, s.Config)
	ctx := context.Background()
	waitForServiceAccount(t, client, "default", "default")
	createNamespace(t, client, "team-a")
	first := waitForServiceAccount(t, client, "team-a", "default")

	// Deleted, it is made again (a new object, a new UID).
	if err := client.CoreV1().ServiceAccounts("team-a").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		sa, err := client.CoreV1().ServiceAccounts("team-a").Get(ctx, "default", metav1.GetOptions{})
		return err == nil && sa.UID != first.UID, nil
	})
	if err != nil {
		t.Fatalf("default service account was not made again after its delete: %v", err)
	}

	// A namespace being deleted loses it for good.
	if err := client.CoreV1().Namespaces().Delete(ctx, "team-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, "team-a", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace with a service account was not deleted: %v", err)
	}
}

func TestServiceAccountCRUDAndTable(t *testing.T) {
	s := controlplanetest.StartServer(t)
	client := clientFor(t, protobuf(s.Config))
	ctx := context.Background()
	sa, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: "builder"},
		Secrets:    []corev1.ObjectReference{{Name: "builder-token"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sa.UID == "" || sa.ResourceVersion == "" {
		t.Fatalf("created %+v", sa.ObjectMeta)
	}
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Not_A_Name"}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("bad name: %v, want 422", err)
	}
	sa.AutomountServiceAccountToken = ptr.To(false)
	if _, err := client.CoreV1().ServiceAccounts("default").Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update: %v", err)
	}

	// kubectl get sa: NAME SECRETS AGE.
	table := &metav1.Table{}
	err = clientFor(t, s.Config).CoreV1().RESTClient().Get().Namespace("default").Resource("serviceaccounts").Name("builder").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Into(table)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"Name", "Secrets", "Age"}) || len(table.Rows) != 1 || table.Rows[0].Cells[0] != "builder" || table.Rows[0].Cells[1] != int64(1) {
		t.Fatalf("table columns %v rows %+v", names, table.Rows)
	}

	// Discovery: the short name and the token subresource of authentication.k8s.io/v1.
	resources, err := client.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	var sawSA, sawToken bool
	for _, r := range resources.APIResources {
		switch r.Name {
		case "serviceaccounts":
			sawSA = slices.Contains(r.ShortNames, "sa") && r.Namespaced
		case "serviceaccounts/token":
			sawToken = r.Group == "authentication.k8s.io" && r.Version == "v1" && r.Kind == "TokenRequest" && slices.Equal(r.Verbs, []string{"create"})
		}
	}
	if !sawSA || !sawToken {
		t.Fatalf("discovery: serviceaccounts %v, serviceaccounts/token %v in %+v", sawSA, sawToken, resources.APIResources)
	}
}

func TestTokenAuthenticatesAsTheServiceAccount(t *testing.T) {
	s := controlplanetest.StartServer(t)
	client := clientFor(t, protobuf(s.Config))
	ctx := context.Background()
	sa := waitForServiceAccount(t, client, "default", "default")
	before := time.Now().Add(-time.Second)
	tr, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Status.Token == "" {
		t.Fatal("no token")
	}
	if exp := tr.Status.ExpirationTimestamp.Time; exp.Before(before.Add(time.Hour)) || exp.After(time.Now().Add(time.Hour+time.Second)) {
		t.Errorf("expirationTimestamp %v, want an hour from now (the default)", exp)
	}
	if !slices.Equal(tr.Spec.Audiences, []string{serviceaccount.DefaultIssuer}) || ptr.Deref(tr.Spec.ExpirationSeconds, 0) != 3600 {
		t.Errorf("defaulted spec %+v", tr.Spec)
	}
	info, err := whoami(t, s, tr.Status.Token)
	if err != nil {
		t.Fatalf("whoami with the token: %v", err)
	}
	if info.Username != "system:serviceaccount:default:default" || info.UID != string(sa.UID) ||
		!slices.Equal(info.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}) {
		t.Fatalf("user %+v", info)
	}
	if id := info.Extra["authentication.kubernetes.io/credential-id"]; len(id) != 1 || !strings.HasPrefix(id[0], "JTI=") {
		t.Errorf("credential-id %v", id)
	}

	// A token for another audience is not for this apiserver.
	vault, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"vault"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whoami(t, s, vault.Status.Token); !apierrors.IsUnauthorized(err) {
		t.Errorf("token for audience vault: %v, want 401", err)
	}

	// Once the service account is deleted, its tokens are refused, even after a new one
	// of the same name (another UID) appears.
	if err := client.CoreV1().ServiceAccounts("default").Delete(ctx, "default", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, err := whoami(t, s, tr.Status.Token) // the watch cache may lag the delete by a moment
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Fatalf("token of a deleted service account still authenticates: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		again, err := client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil && again.UID != sa.UID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := whoami(t, s, tr.Status.Token); !apierrors.IsUnauthorized(err) {
		t.Fatalf("token of a recreated service account: %v, want 401", err)
	}
}

func TestTokenBoundToAPodDiesWithThePod(t *testing.T) {
	s := controlplanetest.StartServer(t)
	client := clientFor(t, s.Config)
	ctx := context.Background()
	waitForServiceAccount(t, client, "default", "default")
	pod, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web", UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := whoami(t, s, tr.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Extra["authentication.kubernetes.io/pod-name"]; !slices.Equal(got, []string{"web"}) {
		t.Errorf("pod-name %v", got)
	}
	if got := info.Extra["authentication.kubernetes.io/pod-uid"]; !slices.Equal(got, []string{string(pod.UID)}) {
		t.Errorf("pod-uid %v", got)
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod after a delete with grace 0: %v", err)
	}
	// The authenticator reads the watch cache, which may lag the delete by a moment.
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		_, err := whoami(t, s, tr.Status.Token)
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Fatalf("token bound to a deleted pod still authenticates: %v", err)
	}
}

func TestTokenRequestErrors(t *testing.T) {
	s := controlplanetest.StartServer(t)
	client := clientFor(t, s.Config)
	ctx := context.Background()
	waitForServiceAccount(t, client, "default", "default")
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podRef := func(uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "web", UID: uid}
	}
	for _, tc := range []struct {
		name    string
		sa      string
		spec    authenticationv1.TokenRequestSpec
		isError func(error) bool
		message string
	}{
		{name: "a lifetime under ten minutes is invalid", sa: "default", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](599)},
			isError: apierrors.IsInvalid, message: "may not specify a duration less than 10 minutes"},
		{name: "a lifetime over 2^32 seconds is invalid", sa: "default", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](1<<32 + 1)},
			isError: apierrors.IsInvalid, message: "may not specify a duration larger than 2^32 seconds"},
		{name: "a service account that does not exist is not found", sa: "ghost",
			isError: apierrors.IsNotFound, message: `serviceaccounts "ghost" not found`},
		{name: "a bound pod that does not exist is not found", sa: "default",
			spec:    authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: "ghost"}},
			isError: apierrors.IsNotFound, message: `pods "ghost" not found`},
		{name: "a bound object of another kind is a bad request", sa: "default",
			spec:    authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "ConfigMap", APIVersion: "v1", Name: "x"}},
			isError: apierrors.IsBadRequest, message: "cannot bind token to object of type /v1, Kind=ConfigMap"},
		{name: "a pod running as another service account is a bad request", sa: "other", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef("")},
			isError: apierrors.IsBadRequest, message: `cannot bind token for serviceaccount "other" to pod running with different serviceaccount name.`},
		{name: "a bound pod UID that is not the pod's conflicts", sa: "default", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: podRef("not-" + pod.UID)},
			isError: apierrors.IsConflict, message: "the UID in the bound object reference (not-" + string(pod.UID) + ") does not match the UID in record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.CoreV1().ServiceAccounts("default").CreateToken(ctx, tc.sa, &authenticationv1.TokenRequest{Spec: tc.spec}, metav1.CreateOptions{})
			if !tc.isError(err) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err %v; want one saying %q", err, tc.message)
			}
		})
	}
}

func TestNodeMayRequestTokensOnlyForItsOwnPods(t *testing.T) {
	s := controlplanetest.StartServer(t)
	admin := clientFor(t, s.Config)
	node := clientFor(t, protobuf(s.ClientConfig("system:node:n1", "system:nodes")))
	ctx := context.Background()
	waitForServiceAccount(t, admin, "default", "default")
	pods := map[string]*corev1.Pod{}
	for name, nodeName := range map[string]string{"mine": "n1", "theirs": "n2"} {
		pod, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[name] = pod
	}
	bound := func(pod string, uid types.UID) *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod, UID: uid}}}
	}
	for _, tc := range []struct {
		name    string
		request *authenticationv1.TokenRequest
		message string // "" allowed
	}{
		{name: "a token bound to a pod on the node is issued", request: bound("mine", pods["mine"].UID)},
		{name: "a token bound to nothing is forbidden", request: &authenticationv1.TokenRequest{}, message: "node requested token not bound to a pod"},
		{name: "a pod binding without a uid is forbidden", request: bound("mine", ""), message: "node requested token with a pod binding without a uid"},
		{name: "a token bound to another node's pod is forbidden", request: bound("theirs", pods["theirs"].UID), message: "node requested token bound to a pod scheduled on a different node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := node.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", tc.request, metav1.CreateOptions{})
			if tc.message == "" {
				if err != nil || tr.Status.Token == "" {
					t.Fatalf("token: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("err %v; want 403 saying %q", err, tc.message)
			}
		})
	}
	// The authorizer: no pod on n3 runs as "default", so n3 may not ask at all.
	other := clientFor(t, s.ClientConfig("system:node:n3", "system:nodes"))
	if _, err := other.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", bound("mine", pods["mine"].UID), metav1.CreateOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "no relationship found between node 'n3' and this object") {
		t.Fatalf("node without such pods: %v, want 403", err)
	}
}
