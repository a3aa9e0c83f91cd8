package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"skiff.dev/services/controlplanetest"
)

// TestFlowcontrolServed covers flowcontrol.apiserver.k8s.io/v1 as the conformance
// suite's API Priority and Fairness "API operations" tests use it: discovery with the
// status subresources, the bootstrap configuration stored at start, create with
// defaults, get, list by label, watch, merge patch, update, the status subresource
// (get, patch, update) leaving the spec alone, delete and delete-collection.
func TestFlowcontrolServed(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resources, err := cs.Discovery().ServerResourcesForGroupVersion("flowcontrol.apiserver.k8s.io/v1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range resources.APIResources {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "flowschemas,flowschemas/status,prioritylevelconfigurations,prioritylevelconfigurations/status" {
		t.Errorf("resources %s", got)
	}

	// The bootstrap configuration is stored as the apiserver starts.
	fsClient, plClient := cs.FlowcontrolV1().FlowSchemas(), cs.FlowcontrolV1().PriorityLevelConfigurations()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, errFS := fsClient.Get(ctx, "global-default", metav1.GetOptions{})
		_, errPL := plClient.Get(ctx, "catch-all", metav1.GetOptions{})
		return errFS == nil && errPL == nil, nil
	}); err != nil {
		t.Fatalf("bootstrap configuration not stored: %v", err)
	}

	pl, err := plClient.Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-level", Labels: map[string]string{"e2e": "apf"}},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: flowcontrolv1.LimitResponse{
				Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := pl.Spec.Limited; *l.NominalConcurrencyShares != 30 || *l.LendablePercent != 0 ||
		*l.LimitResponse.Queuing != (flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 8, QueueLengthLimit: 50}) {
		t.Errorf("defaults: %+v %+v", l, l.LimitResponse.Queuing)
	}

	newSchema := func(name string) *flowcontrolv1.FlowSchema {
		return &flowcontrolv1.FlowSchema{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e": "apf"}},
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "e2e-level"},
				DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
				Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
					Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "e2e"}}},
					NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz/*"}}},
				}},
			},
		}
	}
	w, err := fsClient.Watch(ctx, metav1.ListOptions{LabelSelector: "e2e=apf"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	fs, err := fsClient.Create(ctx, newSchema("e2e-schema"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if fs.Spec.MatchingPrecedence != 1000 || fs.Generation != 1 {
		t.Errorf("matchingPrecedence %d generation %d, want the default 1000 and 1", fs.Spec.MatchingPrecedence, fs.Generation)
	}
	if _, err := fsClient.Create(ctx, newSchema("e2e-schema-2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if got := ev.Object.(*flowcontrolv1.FlowSchema).Name; got != "e2e-schema" {
			t.Errorf("first watch event for %s", got)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	list, err := fsClient.List(ctx, metav1.ListOptions{LabelSelector: "e2e=apf"})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v, %d items", err, len(list.Items))
	}

	patched, err := fsClient.Patch(ctx, fs.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"patched":"true"}},"spec":{"matchingPrecedence":500}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Annotations["patched"] != "true" || patched.Spec.MatchingPrecedence != 500 || patched.Generation != 2 {
		t.Errorf("patched: annotations %v precedence %d generation %d", patched.Annotations, patched.Spec.MatchingPrecedence, patched.Generation)
	}
	patched.Spec.DistinguisherMethod = nil
	updated, err := fsClient.Update(ctx, patched, metav1.UpdateOptions{})
	if err != nil || updated.Spec.DistinguisherMethod != nil {
		t.Fatalf("update: %v, %+v", err, updated.Spec.DistinguisherMethod)
	}

	// The status subresource changes the status only.
	statusPatch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{"ignored": "yes"}},
		"spec":     map[string]any{"matchingPrecedence": 700},
		"status": map[string]any{"conditions": []map[string]any{{
			"type": "StatusPatched", "status": "True", "reason": "E2E", "lastTransitionTime": metav1.Now().Format(time.RFC3339)}}},
	})
	st, err := fsClient.Patch(ctx, fs.Name, types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	// The config controller writes the schema's Dangling condition too (as in kube, the
	// status has two writers): the test looks for its own conditions, and retries its
	// updates on conflict, as kube's conformance test does.
	if !hasFlowSchemaCondition(st, "StatusPatched") || st.Spec.MatchingPrecedence != 500 || st.Labels["ignored"] != "" {
		t.Errorf("status patch: conditions %+v precedence %d labels %v", st.Status.Conditions, st.Spec.MatchingPrecedence, st.Labels)
	}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := fsClient.Get(ctx, fs.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Conditions = append(cur.Status.Conditions, flowcontrolv1.FlowSchemaCondition{Type: "StatusUpdated", Status: flowcontrolv1.ConditionTrue, Reason: "E2E"})
		st, err = fsClient.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil || !hasFlowSchemaCondition(st, "StatusUpdated") {
		t.Fatalf("status update: %v, %+v", err, st)
	}
	// A plain update keeps the stored status.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := fsClient.Get(ctx, fs.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Conditions = nil
		st, err = fsClient.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}); err != nil || !hasFlowSchemaCondition(st, "StatusUpdated") {
		t.Fatalf("update clearing status: %v, %+v", err, st)
	}
	statusObj, err := cs.FlowcontrolV1().RESTClient().Get().Resource("flowschemas").Name(fs.Name).SubResource("status").DoRaw(ctx)
	if err != nil || !strings.Contains(string(statusObj), `"StatusUpdated"`) {
		t.Errorf("get status: %v %s", err, statusObj)
	}

	if err := fsClient.Delete(ctx, fs.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := fsClient.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "e2e=apf"}); err != nil {
		t.Fatal(err)
	}
	if list, err := fsClient.List(ctx, metav1.ListOptions{LabelSelector: "e2e=apf"}); err != nil || len(list.Items) != 0 {
		t.Errorf("after delete-collection: %v, %d items", err, len(list.Items))
	}
}

// TestFlowcontrolValidation: kube's rules and messages, each a 422 naming the field.
func TestFlowcontrolValidation(t *testing.T) {
	srv := controlplanetest.StartServer(t)
	cs := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fsClient, plClient := cs.FlowcontrolV1().FlowSchemas(), cs.FlowcontrolV1().PriorityLevelConfigurations()

	rule := flowcontrolv1.PolicyRulesWithSubjects{
		Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "g"}}},
		ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, ClusterScope: true}},
	}
	for name, tc := range map[string]struct {
		spec flowcontrolv1.FlowSchemaSpec
		want string
	}{
		"precedence 1": {flowcontrolv1.FlowSchemaSpec{MatchingPrecedence: 1, PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"}},
			`spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1`},
		"precedence too high": {flowcontrolv1.FlowSchemaSpec{MatchingPrecedence: 10001, PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"}},
			`spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000`},
		"no priority level": {flowcontrolv1.FlowSchemaSpec{},
			`spec.priorityLevelConfiguration.name: Required value: must reference a priority level`},
		"unsupported verb": {flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{Subjects: rule.Subjects, ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
				Verbs: []string{"escalate"}, APIGroups: []string{""}, Resources: []string{"pods"}, Namespaces: []string{"*"}}}}}},
			`spec.rules[0].resourceRules[0].verbs: Unsupported value: ["escalate"]: supported values: "create", "delete"`},
		"group with user": {flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup,
				Group: &flowcontrolv1.GroupSubject{Name: "g"}, User: &flowcontrolv1.UserSubject{Name: "u"}}}, ResourceRules: rule.ResourceRules}}},
			`spec.rules[0].subjects[0].user: Forbidden: user is forbidden when subject kind is not 'User'`},
		"bad URL": {flowcontrolv1.FlowSchemaSpec{PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{Subjects: rule.Subjects, NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{
				Verbs: []string{"get"}, NonResourceURLs: []string{"/a*"}}}}}},
			`spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: "/a*": wildcard can only do suffix matching`},
	} {
		_, err := fsClient.Create(ctx, &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: tc.spec}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 422 with %q", name, err, tc.want)
		}
	}

	for name, tc := range map[string]struct {
		pl   flowcontrolv1.PriorityLevelConfiguration
		want string
	}{
		"limited named exempt": {flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementExempt}},
			`spec.type: Invalid value: "Exempt": type must be 'Exempt' if and only if name is 'exempt'`},
		"hand larger than queues": {flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
				Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LimitResponse: flowcontrolv1.LimitResponse{
					Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 4, HandSize: 5}}}}},
			`spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)`},
		"lendable over 100": {flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
				Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{LendablePercent: ptr.To(int32(101)),
					LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}}}},
			`spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive`},
	} {
		_, err := plClient.Create(ctx, &tc.pl, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 422 with %q", name, err, tc.want)
		}
	}

	// The mandatory objects' specs are fixed.
	var catchAll *flowcontrolv1.FlowSchema
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		catchAll, err = fsClient.Get(ctx, flowcontrolv1.FlowSchemaNameCatchAll, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	catchAll.Spec.MatchingPrecedence = 9000
	if _, err := fsClient.Update(ctx, catchAll, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) ||
		!strings.Contains(err.Error(), "spec of 'catch-all' must equal the fixed value") {
		t.Errorf("changing catch-all: %v, want 422", err)
	}
}

// hasFlowSchemaCondition reports whether fs's status holds a condition of type t.
func hasFlowSchemaCondition(fs *flowcontrolv1.FlowSchema, t flowcontrolv1.FlowSchemaConditionType) bool {
	for _, c := range fs.Status.Conditions {
		if c.Type == t {
			return true
		}
	}
	return false
}
