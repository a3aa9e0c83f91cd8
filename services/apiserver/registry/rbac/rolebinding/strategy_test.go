package rolebinding

import (
	"context"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTableRow(t *testing.T) {
	b := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", CreationTimestamp: metav1.NewTime(time.Now().Add(-2 * time.Minute))},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, Name: "jane"}, {Kind: rbacv1.UserKind, Name: "joe"},
			{Kind: rbacv1.GroupKind, Name: "team"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: "ns", Name: "default"}, {Kind: rbacv1.ServiceAccountKind, Name: "local"},
		},
	}
	s := Strategy{}
	row, columns := s.TableRow(b), s.TableColumns()
	want := []interface{}{"b", "ClusterRole/view", "2m", "jane, joe", "team", "ns/default, local"}
	if len(row) != len(columns) {
		t.Fatalf("%d cells for %d columns", len(row), len(columns))
	}
	for i := range want {
		if row[i] != want[i] {
			t.Errorf("cell %d = %v, want %v", i, row[i], want[i])
		}
	}
	for i, col := range columns {
		if wide := col.Priority == 1; wide != (i >= 3) {
			t.Errorf("column %s priority %d", col.Name, col.Priority)
		}
	}
}

func TestPrepareForCreateDefaultsAPIGroups(t *testing.T) {
	b := &rbacv1.RoleBinding{RoleRef: rbacv1.RoleRef{Kind: "Role", Name: "r"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "jane"}, {Kind: rbacv1.ServiceAccountKind, Name: "default"}}}
	Strategy{}.PrepareForCreate(context.Background(), b)
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != rbacv1.GroupName || b.Subjects[1].APIGroup != "" {
		t.Fatalf("roleRef %+v subjects %+v", b.RoleRef, b.Subjects)
	}
}
