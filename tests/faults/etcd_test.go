package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"skiff.dev/tests/internal/composetest"
)

// etcdHistory reads the stack's etcd directly, with the etcdctl of the etcd container
// (docker exec) over mutual TLS with the health check's certificate, the one etcd client
// identity that container holds: the host need not reach the container's network.
type etcdHistory struct {
	s *composetest.Stack
}

func newEtcdHistory(t *testing.T, s *composetest.Stack) *etcdHistory {
	return &etcdHistory{s: s}
}

// etcdctl is the command line that runs etcdctl in the etcd container with args.
func (h *etcdHistory) etcdctl(t *testing.T, args ...string) []string {
	return append([]string{"exec", h.s.Containers(t, "etcd")[0], "/usr/local/bin/etcdctl",
		"--endpoints=https://127.0.0.1:2379", "--cacert=/etc/kubernetes/pki/etcd/ca.crt",
		"--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt", "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key",
		"--command-timeout=30s", "-w", "json"}, args...)
}

// etcdKV and etcdEvent are etcdctl's JSON of mvccpb.KeyValue and mvccpb.Event.
type etcdKV struct {
	Key            []byte `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Value          []byte `json:"value"`
}

type etcdEvent struct {
	Type int    `json:"type"` // 0 PUT, 1 DELETE
	Kv   etcdKV `json:"kv"`
}

// keyEvent is one change of one key, as etcd's history holds it and as a watch must
// deliver it: the type a kube watch gives it (ADDED for a PUT that created the key,
// MODIFIED for a later PUT, DELETED), the object name and the revision.
type keyEvent struct {
	Type     string
	Name     string
	Revision int64
	NodeName string // spec.nodeName after the event ("" for DELETED)
	UID      string
}

func (e keyEvent) String() string { return fmt.Sprintf("%s %s@%d", e.Type, e.Name, e.Revision) }

// history returns every event under prefix with a revision above after, up to the
// highest revision of a key under it now, in revision order (`etcdctl watch --rev`,
// read until that revision). prefix must only change by PUTs for the end to be found:
// the matrix deletes a row's pods only after reading its history.
func (h *etcdHistory) history(t *testing.T, prefix string, after int64) []keyEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(h.s.Ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", h.etcdctl(t, "get", "--prefix", "--keys-only", prefix)...).Output()
	if err != nil {
		t.Fatalf("etcdctl get %s: %v", prefix, err)
	}
	var got struct {
		Kvs []etcdKV `json:"kvs"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("etcdctl get %s: %v: %s", prefix, err, out)
	}
	var last int64
	for _, kv := range got.Kvs {
		last = max(last, kv.ModRevision)
	}
	if last <= after {
		return nil
	}

	// The watch never ends by itself: read until last, then stop the docker exec client.
	// (etcdctl inside the container goes with the container at down.)
	cmd := exec.CommandContext(ctx, "docker", h.etcdctl(t, "watch", "--prefix", fmt.Sprintf("--rev=%d", after+1), prefix)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	dec := json.NewDecoder(stdout)
	var events []keyEvent
	for {
		var wr struct {
			Events []etcdEvent `json:"Events"`
		}
		if err := dec.Decode(&wr); err != nil {
			t.Fatalf("etcdctl watch %s from %d: %v (%d events read, want up to revision %d)", prefix, after+1, err, len(events), last)
		}
		for _, ev := range wr.Events {
			e := keyEvent{Name: strings.TrimPrefix(string(ev.Kv.Key), prefix), Revision: ev.Kv.ModRevision}
			switch {
			case ev.Type == 1:
				e.Type = "DELETED"
			case ev.Kv.CreateRevision == ev.Kv.ModRevision:
				e.Type = "ADDED"
			default:
				e.Type = "MODIFIED"
			}
			if e.Type != "DELETED" {
				obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(ev.Kv.Value, nil, nil)
				if err != nil {
					t.Fatalf("etcd %s@%d: %v", ev.Kv.Key, ev.Kv.ModRevision, err)
				}
				if pod, ok := obj.(*corev1.Pod); ok {
					e.NodeName, e.UID = pod.Spec.NodeName, string(pod.UID)
				}
			}
			events = append(events, e)
			if e.Revision >= last {
				return events
			}
		}
	}
}

// podAudit is what the history of a row's pods shows.
type podAudit struct {
	created     map[string]int      // pod name -> times its key was created
	uids        map[string][]string // pod name -> distinct UIDs it had
	bindings    map[string][]string // pod name -> successive non-empty nodeNames
	duplicated  []string
	doubleBound []string
}

// auditPods reads the events of a namespace's pods: a key created more than once or
// holding more than one UID is duplicated; a pod whose nodeName was set more than once
// (a second binding, to the same node or another) is double bound.
func auditPods(events []keyEvent) podAudit {
	a := podAudit{created: map[string]int{}, uids: map[string][]string{}, bindings: map[string][]string{}}
	node := map[string]string{}
	for _, e := range events {
		if e.Type == "ADDED" {
			a.created[e.Name]++
		}
		if e.UID != "" {
			if u := a.uids[e.Name]; len(u) == 0 || u[len(u)-1] != e.UID {
				a.uids[e.Name] = append(u, e.UID)
			}
		}
		if e.Type != "DELETED" && e.NodeName != node[e.Name] {
			if e.NodeName != "" {
				a.bindings[e.Name] = append(a.bindings[e.Name], e.NodeName)
			}
			node[e.Name] = e.NodeName
		}
	}
	for name, n := range a.created {
		if n > 1 || len(a.uids[name]) > 1 {
			a.duplicated = append(a.duplicated, fmt.Sprintf("%s (created %d times, UIDs %v)", name, n, a.uids[name]))
		}
	}
	for name, nodes := range a.bindings {
		if len(nodes) > 1 {
			a.doubleBound = append(a.doubleBound, fmt.Sprintf("%s (bound to %v)", name, nodes))
		}
	}
	sort.Strings(a.duplicated)
	sort.Strings(a.doubleBound)
	return a
}
