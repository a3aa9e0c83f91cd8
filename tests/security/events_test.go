package security

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"skiff.dev/tests/security/attack"
)

// TestANodeCannotReportAsAnotherNode: a node may publish events only under its own
// subject, and one that claims to come from another node there is dropped by the
// apiserver's sink and counted, while the node's own event of the same shape is stored.
// (Publishing under the other node's subject is a row of the matrix.)
func TestANodeCannotReportAsAnotherNode(t *testing.T) {
	tg := startTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := refusedEvents(ctx, t, tg, "node_restriction")
	event := func(name, host string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"name":%q,"namespace":"default"},"involvedObject":{"kind":"Pod","namespace":"default","name":%q},`+
			`"reason":"Attack","message":"reported by %s","type":"Warning","source":{"component":"kubelet","host":%q},"count":1}`, name, tg.victim, host, host)
	}
	own := "skiff.events.default.system:node:" + nodeName
	for _, v := range attack.RunAll(ctx, []attack.Attempt{
		{Name: "forged", Door: attack.NATSPublish, Target: tg.NATSURL, Subject: own, Body: event("forged.1", otherNode), Cred: tg.node},
		{Name: "own", Door: attack.NATSPublish, Target: tg.NATSURL, Subject: own, Body: event("own.1", nodeName), Cred: tg.node},
	}) {
		if v.Refused {
			t.Fatalf("%s: NATS refused the node's own subject: %s", v.Name, v.Detail)
		}
	}
	if err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := tg.Client.CoreV1().Events("default").Get(ctx, "own.1", metav1.GetOptions{})
		return err == nil && refusedEvents(ctx, t, tg, "node_restriction") == before+1, nil
	}); err != nil {
		t.Fatalf("the node's own event stored and the forged one counted refused (%v → %v): %v",
			before, refusedEvents(ctx, t, tg, "node_restriction"), err)
	}
	if _, err := tg.Client.CoreV1().Events("default").Get(ctx, "forged.1", metav1.GetOptions{}); err == nil {
		t.Error("the event that claimed to come from another node was stored")
	}
}

// refusedEvents is the apiserver's count of events its sink refused for reason.
func refusedEvents(ctx context.Context, t *testing.T, tg *target, reason string) int {
	t.Helper()
	n, err := attack.RefusedEvents(ctx, tg.Client.CoreV1().RESTClient(), reason)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
