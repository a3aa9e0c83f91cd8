package apiserver_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"skiff.dev/services/controlplanetest"
)

// TestListOfOneNameIsAuthorizedAsThatName: a Role limited by resourceNames allows a list
// and a watch selecting that one name (fieldSelector=metadata.name=NAME), as an
// informer on one object makes them (extension API servers read
// extension-apiserver-authentication so), and nothing wider.
func TestListOfOneNameIsAuthorizedAsThatName(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles("default").Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "one-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"one"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "one-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "one-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "reader"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader := kubernetes.NewForConfigOrDie(srv.ClientConfig("reader"))
	one := metav1.ListOptions{FieldSelector: "metadata.name=one"}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := reader.CoreV1().ConfigMaps("default").List(ctx, one)
		return err == nil && len(list.Items) == 1, nil
	}); err != nil {
		t.Fatalf("listing metadata.name=one with a rule naming it: %v", err)
	}
	w, err := reader.CoreV1().ConfigMaps("default").Watch(ctx, one)
	if err != nil {
		t.Fatalf("watching metadata.name=one: %v", err)
	}
	w.Stop()
	if _, err := reader.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing every ConfigMap: %v, want 403", err)
	}
	if _, err := reader.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=two"}); !apierrors.IsForbidden(err) {
		t.Errorf("listing metadata.name=two: %v, want 403", err)
	}
}
