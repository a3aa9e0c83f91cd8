package storage

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// FuzzSelectionPredicate parses a label and a field selector as a list's query does and
// matches them against an object with fuzzed labels and fields. Properties: parsing
// either fails or yields a selector whose String() parses back to the same selector;
// Matches never fails; and it agrees with the selectors applied one by one.
func FuzzSelectionPredicate(f *testing.F) {
	f.Add("app=web,tier!=db", "spec.nodeName=n1", "app", "web", "spec.nodeName", "n1")
	f.Add("a in (b,c),!d,e notin (f)", "status.phase!=Failed,metadata.name==x", "e", "g", "status.phase", "Running")
	f.Add("x>1,y<3,z", "metadata.namespace=", "x", "2", "metadata.namespace", "")
	f.Add("!!a,,=", "a\\,b=c", "", "", "", "")
	f.Fuzz(func(t *testing.T, labelSel, fieldSel, labelKey, labelValue, fieldKey, fieldValue string) {
		ls, lerr := labels.Parse(labelSel)
		fs, ferr := fields.ParseSelector(fieldSel)
		if lerr == nil {
			again, err := labels.Parse(ls.String())
			if err != nil || again.String() != ls.String() {
				t.Fatalf("label selector %q: String() %q parses to %v, %v", labelSel, ls.String(), again, err)
			}
		}
		if ferr == nil {
			again, err := fields.ParseSelector(fs.String())
			if err != nil || again.String() != fs.String() {
				t.Fatalf("field selector %q: String() %q parses to %v, %v", fieldSel, fs.String(), again, err)
			}
		}
		if lerr != nil || ferr != nil {
			return
		}
		lset, fset := labels.Set{}, fields.Set{}
		if labelKey != "" {
			lset[labelKey] = labelValue
		}
		if fieldKey != "" && !strings.ContainsAny(fieldKey, ",=!") {
			fset[fieldKey] = fieldValue
		}
		p := SelectionPredicate{Label: ls, Field: fs, GetAttrs: func(runtime.Object) (labels.Set, fields.Set, error) { return lset, fset, nil }}
		got, err := p.Matches(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}})
		if err != nil {
			t.Fatalf("Matches: %v", err)
		}
		if want := ls.Matches(lset) && fs.Matches(fset); got != want {
			t.Fatalf("Matches(%v, %v) = %v, want %v (labels %q, fields %q)", lset, fset, got, want, labelSel, fieldSel)
		}
	})
}
