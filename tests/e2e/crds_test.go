package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"skiff.dev/tests/internal/skifftest"
)

// crdProject is one project's CustomResourceDefinitions, as it ships them
// (testdata/crds), and the custom resources the test makes of them
// (testdata/customresources).
type crdProject struct {
	name    string
	crds    []crdManifest
	kinds   []crdKind
	upgrade *schemaUpgrade // nil for none
}

// schemaUpgrade is a change a project's next release may make to a CRD: a tighter
// schema under which an existing object is invalid. kube ratchets validation (the
// CRDValidationRatcheting feature, on by default since 1.30): an update may keep an
// invalid value it does not change, and must not bring a new one.
type schemaUpgrade struct {
	crd            string   // the CRD's name
	patch          string   // a JSON patch of the CRD that tightens its schema
	resource, name string   // an object the patch makes invalid
	invalidChange  string   // a merge patch of the object to another invalid value
	refusedWants   []string // what kubectl prints when invalidChange is refused
	otherChange    string   // a merge patch of another field, which must be accepted
}

// crdManifest is one CRD file and the CRD it holds.
type crdManifest struct {
	file string // under testdata/crds
	name string // metadata.name
	// serverSide: kubectl apply --server-side, for a CRD too large for the
	// last-applied-configuration annotation of a client-side apply (256 KiB), as the
	// projects tell their users.
	serverSide bool
}

// crdKind is one kind a CRD declares and what the test checks of it.
type crdKind struct {
	crd      string // the CRD that declares it
	kind     string
	resource string // what kubectl get is given: a short name, checking discovery
	ref      string // kubectl's name of the valid object, e.g. certificate.cert-manager.io/example-com

	valid string // file of a valid object, created with kubectl create

	columns     []string // the header of kubectl get: the CRD's additionalPrinterColumns of priority 0
	wideColumns []string // the header of kubectl get -o wide: all of them
	row         []string // words the valid object's row holds

	explain      string // kubectl explain's argument
	explainWants []string

	invalid      string   // file of an object the schema refuses
	invalidWants []string // what kubectl prints

	refused []refusal // more objects the CRD refuses

	changed      string // the valid object with a change, applied server-side
	conflictWith string // the conflict applying changed without --force-conflicts reports ("" for none)
	jsonpath     string // where the change shows...
	want         string // ...and what it is once applied
}

// refusal is an object a CRD refuses and what kubectl prints.
type refusal struct {
	file  string // under testdata/customresources
	name  string // its metadata.name, which must not exist afterwards
	wants []string
}

// realProjectCRDs are the CRDs of the projects under test.
var realProjectCRDs = []crdProject{
	{
		name: "cert-manager",
		crds: []crdManifest{
			{file: "cert-manager.io_certificates.yaml", name: "certificates.cert-manager.io"},
			// 316 KiB of YAML: applied server-side, the way GitOps tools apply CRDs.
			{file: "cert-manager.io_issuers.yaml", name: "issuers.cert-manager.io", serverSide: true},
		},
		kinds: []crdKind{{
			crd:  "certificates.cert-manager.io",
			kind: "Certificate", resource: "cert", ref: "certificate.cert-manager.io/example-com",
			valid:       "certificate.yaml",
			columns:     []string{"NAME", "READY", "SECRET", "AGE"},
			wideColumns: []string{"NAME", "READY", "SECRET", "ISSUER", "STATUS", "AGE"},
			row:         []string{"example-com", "example-com-tls"},
			explain:     "certificates.spec.secretName",
			explainWants: []string{"KIND:       Certificate", "FIELD: secretName <string>",
				"Name of the Secret resource that will be automatically created and"},
			invalid: "certificate-invalid.yaml",
			invalidWants: []string{`The Certificate "bad" is invalid`,
				`spec.dnsNames: Invalid value: "string": spec.dnsNames in body must be of type array: "string"`,
				`spec.secretName: Required value`},
			refused: []refusal{{file: "certificate-unknown-field.yaml", name: "typo",
				wants: []string{`strict decoding error: unknown field "spec.secretname"`}}},
			changed:      "certificate-changed.yaml",
			conflictWith: `Apply failed with 1 conflict: conflict with "kubectl-create" using cert-manager.io/v1: .spec.secretName`,
			jsonpath:     "{.spec.secretName}", want: "example-com-tls-v2",
		}, {
			crd:  "issuers.cert-manager.io",
			kind: "Issuer", resource: "iss", ref: "issuer.cert-manager.io/selfsigned",
			valid:       "issuer.yaml",
			columns:     []string{"NAME", "READY", "AGE"},
			wideColumns: []string{"NAME", "READY", "STATUS", "AGE"},
			row:         []string{"selfsigned"},
			explain:     "issuers.spec.selfSigned",
			explainWants: []string{"KIND:       Issuer", "FIELD: selfSigned <Object>",
				"SelfSigned configures this issuer to 'self sign' certificates using the",
				"crlDistributionPoints\t<[]string>"},
			invalid: "issuer-invalid.yaml",
			invalidWants: []string{`The Issuer "bad" is invalid`,
				`spec.ca.secretName: Required value`,
				`spec.selfSigned: Invalid value: "string": spec.selfSigned in body must be of type object: "string"`},
			changed:      "issuer-changed.yaml",
			conflictWith: `Apply failed with 1 conflict: conflict with "kubectl-create" using cert-manager.io/v1: .spec.selfSigned.crlDistributionPoints`,
			jsonpath:     "{.spec.selfSigned.crlDistributionPoints[0]}", want: "http://crl.example.com/b.crl",
		}},
		upgrade: &schemaUpgrade{
			crd:           "certificates.cert-manager.io",
			patch:         `[{"op":"add","path":"/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/secretName/pattern","value":"^[a-z0-9-]+-tls$"}]`,
			resource:      "cert",
			name:          "example-com", // its secretName is example-com-tls-v2 by now
			invalidChange: `{"spec":{"secretName":"example-com-tls-v3"}}`,
			refusedWants: []string{`The Certificate "example-com" is invalid`,
				`spec.secretName: Invalid value: "example-com-tls-v3": spec.secretName in body should match '^[a-z0-9-]+-tls$'`},
			otherChange: `{"spec":{"dnsNames":["example.com"]}}`,
		},
	},
	{
		name: "prometheus-operator",
		crds: []crdManifest{
			{file: "monitoring.coreos.com_servicemonitors.yaml", name: "servicemonitors.monitoring.coreos.com"},
			{file: "monitoring.coreos.com_prometheusrules.yaml", name: "prometheusrules.monitoring.coreos.com"},
			// 358 KiB of YAML: applied server-side, as prometheus-operator tells its users.
			{file: "monitoring.coreos.com_prometheuses.yaml", name: "prometheuses.monitoring.coreos.com", serverSide: true},
		},
		kinds: []crdKind{{
			crd:  "servicemonitors.monitoring.coreos.com",
			kind: "ServiceMonitor", resource: "smon", ref: "servicemonitor.monitoring.coreos.com/web",
			valid: "servicemonitor.yaml",
			// No additionalPrinterColumns: NAME and AGE, as kube prints.
			columns:     []string{"NAME", "AGE"},
			wideColumns: []string{"NAME", "AGE"},
			row:         []string{"web"},
			explain:     "servicemonitors.spec.endpoints.interval",
			explainWants: []string{"KIND:       ServiceMonitor", "FIELD: interval <string>",
				"interval at which Prometheus scrapes the metrics from the target."},
			invalid: "servicemonitor-invalid.yaml",
			invalidWants: []string{`The ServiceMonitor "bad" is invalid`,
				`spec.endpoints: Invalid value: "string": spec.endpoints in body must be of type array: "string"`,
				`spec.selector: Required value`},
			refused: []refusal{{file: "servicemonitor-unknown-field.yaml", name: "typo",
				wants: []string{`strict decoding error: unknown field "spec.endpoints.port"`}},
				{file: "servicemonitor-duplicate-protocol.yaml", name: "dup",
					wants: []string{`The ServiceMonitor "dup" is invalid`, `spec.scrapeProtocols[1]: Duplicate value: "PrometheusProto"`}}},
			changed: "servicemonitor-changed.yaml",
			// endpoints has no x-kubernetes-list-type: an atomic list, owned whole.
			conflictWith: `Apply failed with 1 conflict: conflict with "kubectl-create" using monitoring.coreos.com/v1: .spec.endpoints`,
			jsonpath:     "{.spec.endpoints[0].interval}", want: "15s",
		}, {
			crd:  "prometheusrules.monitoring.coreos.com",
			kind: "PrometheusRule", resource: "promrule", ref: "prometheusrule.monitoring.coreos.com/web-rules",
			valid:       "prometheusrule.yaml",
			columns:     []string{"NAME", "AGE"},
			wideColumns: []string{"NAME", "AGE"},
			row:         []string{"web-rules"},
			explain:     "prometheusrules.spec.groups",
			explainWants: []string{"KIND:       PrometheusRule", "FIELD: groups <[]Object>",
				"Content of Prometheus rule file", "name\t<string> -required-"},
			invalid: "prometheusrule-invalid.yaml",
			invalidWants: []string{`The PrometheusRule "bad" is invalid`,
				`spec.groups[0].rules[0].for: Invalid value: "5 minutes": spec.groups[0].rules[0].for in body should match '^(0|(([0-9]+)y)?`},
			refused: []refusal{{file: "prometheusrule-duplicate-group.yaml", name: "dup",
				wants: []string{`The PrometheusRule "dup" is invalid`, `spec.groups[1]: Duplicate value:`}}},
			changed: "prometheusrule-changed.yaml",
			// groups is a map list keyed by name; its rules an atomic list.
			conflictWith: `Apply failed with 1 conflict: conflict with "kubectl-create" using monitoring.coreos.com/v1: .spec.groups[name="web"].rules`,
			jsonpath:     "{.spec.groups[0].rules[0].for}", want: "10m",
		}, {
			crd:  "prometheuses.monitoring.coreos.com",
			kind: "Prometheus", resource: "prometheus", ref: "prometheus.monitoring.coreos.com/main",
			valid:       "prometheus.yaml",
			columns:     []string{"NAME", "VERSION", "REPLICAS", "AGE"},
			wideColumns: []string{"NAME", "VERSION", "REPLICAS", "AGE"},
			row:         []string{"main", "v2.22.0", "2"},
			explain:     "prometheuses.spec.retention",
			explainWants: []string{"KIND:       Prometheus", "FIELD: retention <string>",
				"Time duration Prometheus shall retain data for."},
			invalid: "prometheus-invalid.yaml",
			invalidWants: []string{`The Prometheus "bad" is invalid`,
				`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`,
				`spec.alerting.alertmanagers[0].namespace: Required value`,
				`spec.alerting.alertmanagers[0].port: Required value`},
			changed:      "prometheus-changed.yaml",
			conflictWith: `Apply failed with 1 conflict: conflict with "kubectl-create" using monitoring.coreos.com/v1: .spec.replicas`,
			jsonpath:     "{.spec.replicas}", want: "3",
		}},
	},
}

// TestRealProjectCRDs applies the CustomResourceDefinitions real projects ship
// (testdata/crds, unmodified) with the real kubectl and uses their custom resources
// the way users do: the CRDs are Established, objects are created, kubectl get prints
// the CRDs' printer columns, kubectl explain their schemas' descriptions, objects the
// schema refuses are refused with kube's wording, server-side apply merges by the
// schema's list types, a watch sees a change, a tightened schema ratchets, and deleting
// a CRD deletes its objects (waiting, Terminating, for an object's finalizer).
func TestRealProjectCRDs(t *testing.T) {
	c := startSkiff(t, "sim")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, p := range realProjectCRDs {
		t.Run(p.name, func(t *testing.T) { c.checkCRDProject(ctx, t, p) })
	}
}

func crdTestdata(dir, file string) string { return filepath.Join("testdata", dir, file) }

// must is kubectl that fails t (not the cluster's test) on a non-zero exit.
func (c *cluster) must(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// refused is kubectl that must exit non-zero.
func (c *cluster) refused(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.kubectl(ctx, args...)
	if err == nil {
		t.Errorf("kubectl %s succeeded:\n%s", strings.Join(args, " "), out)
	}
	return out
}

func expectAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func (c *cluster) checkCRDProject(ctx context.Context, t *testing.T, p crdProject) {
	var names []string
	for _, crd := range p.crds {
		names = append(names, crd.name)
	}
	apply := func(t *testing.T) {
		t.Helper()
		for _, crd := range p.crds {
			args, want := []string{"apply", "-f", crdTestdata("crds", crd.file)}, "customresourcedefinition.apiextensions.k8s.io/"+crd.name+" created"
			if crd.serverSide {
				args, want = append(args, "--server-side"), "customresourcedefinition.apiextensions.k8s.io/"+crd.name+" serverside-applied"
			}
			expectAll(t, c.must(ctx, t, args...), want)
		}
		args := []string{"wait", "--for", "condition=Established", "--timeout=60s"}
		for _, name := range names {
			args = append(args, "crd/"+name)
		}
		out := c.must(ctx, t, args...)
		for _, name := range names {
			expectAll(t, out, "customresourcedefinition.apiextensions.k8s.io/"+name+" condition met")
		}
	}
	if !t.Run("apply the CRDs and wait for Established", apply) {
		return
	}
	t.Run("names accepted", func(t *testing.T) {
		for _, name := range names {
			out := c.must(ctx, t, "get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type==\"NamesAccepted\")].status} {.status.acceptedNames.kind}")
			if !strings.HasPrefix(out, "True ") {
				t.Errorf("crd/%s NamesAccepted and accepted kind: %q", name, out)
			}
		}
	})
	for _, k := range p.kinds {
		t.Run(k.kind, func(t *testing.T) { c.checkCustomResource(ctx, t, k) })
	}
	if u := p.upgrade; u != nil {
		t.Run("a tightened schema ratchets", func(t *testing.T) { c.checkRatcheting(ctx, t, u) })
	}
	t.Run("delete crd deletes the custom resources", func(t *testing.T) {
		// A finalizer on the last kind's object holds its CRD in Terminating, as
		// kube's customresourcecleanup finalizer waits for every object to go.
		held := p.kinds[len(p.kinds)-1]
		heldName := held.ref[strings.Index(held.ref, "/")+1:]
		expectAll(t, c.must(ctx, t, "patch", held.resource, heldName, "--type=merge", "-p", `{"metadata":{"finalizers":["e2e.skiff.dev/hold"]}}`), held.ref+" patched")
		out := c.must(ctx, t, append([]string{"delete", "crd", "--wait=false"}, names...)...)
		for _, name := range names {
			expectAll(t, out, `customresourcedefinition.apiextensions.k8s.io "`+name+`" deleted`)
		}
		for _, name := range names {
			if name == held.crd {
				continue
			}
			eventually(t, 30*time.Second, func() (bool, string) {
				out, err := c.kubectl(ctx, "get", "crd", name)
				return err != nil && strings.Contains(out, `customresourcedefinitions.apiextensions.k8s.io "`+name+`" not found`), out
			})
		}
		t.Run("held by a finalizer", func(t *testing.T) {
			expectAll(t, c.refused(ctx, t, "create", "-f", crdTestdata("customresources", held.valid)),
				"create not allowed while custom resource definition is terminating")
			if out := c.must(ctx, t, "get", held.resource, heldName, "-o", "jsonpath={.metadata.deletionTimestamp}"); out == "" {
				t.Errorf("%s has no deletionTimestamp while its CRD is terminating", held.ref)
			}
			// kube's finalizer controller says it is deleting the objects.
			eventually(t, 30*time.Second, func() (bool, string) {
				out, _ := c.kubectl(ctx, "get", "crd", held.crd, "-o", `jsonpath={.status.conditions[?(@.type=="Terminating")].reason}`)
				return out == "InstanceDeletionInProgress", "Terminating reason " + strconv.Quote(out) + ", want InstanceDeletionInProgress"
			})
		})
		expectAll(t, c.must(ctx, t, "patch", held.resource, heldName, "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`), held.ref+" patched")
		eventually(t, 30*time.Second, func() (bool, string) {
			out, err := c.kubectl(ctx, "get", "crd", held.crd)
			return err != nil && strings.Contains(out, `customresourcedefinitions.apiextensions.k8s.io "`+held.crd+`" not found`), out
		})
		// The same CRDs again: their objects must not come back with them.
		apply(t)
		for _, k := range p.kinds {
			out := c.must(ctx, t, "get", k.resource, "-A")
			if name := k.ref[strings.Index(k.ref, "/")+1:]; strings.Contains(out, name) {
				t.Errorf("%s outlived its CRD:\n%s", k.ref, out)
			}
			expectAll(t, out, "No resources found")
		}
		c.must(ctx, t, append([]string{"delete", "crd"}, names...)...)
	})
}

// checkRatcheting tightens a CRD's schema under an existing object, then updates the
// object: changes that keep its now-invalid value must pass, a new invalid value must
// not.
func (c *cluster) checkRatcheting(ctx context.Context, t *testing.T, u *schemaUpgrade) {
	expectAll(t, c.must(ctx, t, "patch", "crd", u.crd, "--type=json", "-p", u.patch), "customresourcedefinition.apiextensions.k8s.io/"+u.crd+" patched")
	// The tighter schema is in force once it refuses a new invalid value.
	eventually(t, 30*time.Second, func() (bool, string) {
		out, err := c.kubectl(ctx, "patch", u.resource, u.name, "--type=merge", "-p", u.invalidChange, "--dry-run=server")
		return err != nil && strings.Contains(out, u.refusedWants[len(u.refusedWants)-1]), out
	})
	expectAll(t, c.refused(ctx, t, "patch", u.resource, u.name, "--type=merge", "-p", u.invalidChange), u.refusedWants...)
	out, err := c.kubectl(ctx, "label", u.resource, u.name, "upgraded=true")
	if err != nil || !strings.Contains(out, " labeled") {
		t.Errorf("kubectl label of an object the new schema finds invalid in a field the label leaves alone: %v\n%s", err, out)
	}
	out, err = c.kubectl(ctx, "patch", u.resource, u.name, "--type=merge", "-p", u.otherChange)
	if err != nil || !strings.Contains(out, " patched") {
		t.Errorf("kubectl patch %s of an object the new schema finds invalid in another field: %v\n%s", u.otherChange, err, out)
	}
}

func (c *cluster) checkCustomResource(ctx context.Context, t *testing.T, k crdKind) {
	if !t.Run("create", func(t *testing.T) {
		expectAll(t, c.must(ctx, t, "create", "-f", crdTestdata("customresources", k.valid)), k.ref+" created")
	}) {
		return
	}

	t.Run("get prints the printer columns", func(t *testing.T) {
		for _, wide := range []bool{false, true} {
			args, want := []string{"get", k.resource}, k.columns
			if wide {
				args, want = append(args, "-o", "wide"), k.wideColumns
			}
			out := c.must(ctx, t, args...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if got := strings.Fields(lines[0]); !slices.Equal(got, want) {
				t.Errorf("kubectl %s header %q, want %q:\n%s", strings.Join(args, " "), got, want, out)
			}
			if len(lines) != 2 {
				t.Errorf("kubectl %s: want a header and one row:\n%s", strings.Join(args, " "), out)
				continue
			}
			row := strings.Fields(lines[1])
			for _, word := range k.row {
				if !slices.Contains(row, word) {
					t.Errorf("kubectl %s: row lacks %q:\n%s", strings.Join(args, " "), word, out)
				}
			}
		}
	})

	t.Run("explain prints the schema's descriptions", func(t *testing.T) {
		expectAll(t, c.must(ctx, t, "explain", k.explain), k.explainWants...)
	})

	t.Run("an invalid object is refused", func(t *testing.T) {
		expectAll(t, c.refused(ctx, t, "create", "-f", crdTestdata("customresources", k.invalid)), k.invalidWants...)
		expectAll(t, c.refused(ctx, t, "get", k.resource, "bad"), `"bad" not found`)
		for _, r := range k.refused {
			expectAll(t, c.refused(ctx, t, "create", "-f", crdTestdata("customresources", r.file)), r.wants...)
			expectAll(t, c.refused(ctx, t, "get", k.resource, r.name), `"`+r.name+`" not found`)
		}
	})

	t.Run("apply --server-side of a change, seen by a watch", func(t *testing.T) {
		watch := c.startWatch(ctx, t, k.resource)
		changed := crdTestdata("customresources", k.changed)
		if k.conflictWith != "" {
			out := c.refused(ctx, t, "apply", "--server-side", "-f", changed)
			expectAll(t, out, k.conflictWith, "--force-conflicts")
			expectAll(t, c.must(ctx, t, "apply", "--server-side", "--force-conflicts", "-f", changed), k.ref+" serverside-applied")
		} else {
			expectAll(t, c.must(ctx, t, "apply", "--server-side", "-f", changed), k.ref+" serverside-applied")
		}
		name := k.ref[strings.Index(k.ref, "/")+1:]
		if got := c.must(ctx, t, "get", k.resource, name, "-o", "jsonpath="+k.jsonpath); got != k.want {
			t.Errorf("%s after the apply: %q, want %q", k.jsonpath, got, k.want)
		}
		expectAll(t, c.must(ctx, t, "get", k.resource, name, "--show-managed-fields", "-o", "yaml"), "manager: kubectl\n    operation: Apply")
		eventually(t, 30*time.Second, func() (bool, string) {
			out := watch.stdout.String()
			return strings.Contains(out, k.ref), "kubectl get --watch-only printed " + strconv.Quote(out) + "; stderr:\n" + watch.stderr.String()
		})
		watch.stop()
	})
}

// backgroundWatch is a `kubectl get RESOURCE --watch-only -o name` running.
type backgroundWatch struct {
	stdout, stderr *skifftest.SyncBuffer
	stop           func()
}

// startWatch starts `kubectl get resource --watch-only -o name` and returns once the
// server has answered its watch request (kubectl -v=6 logs it), so that any change made
// afterwards is one the watch must print. The watch ends with t at the latest.
func (c *cluster) startWatch(ctx context.Context, t *testing.T, resource string) *backgroundWatch {
	t.Helper()
	cmd := exec.CommandContext(ctx, kubectlPath(t), "get", resource, "--watch-only", "-o", "name", "-v=6")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECACHEDIR="+c.cacheDir)
	w := &backgroundWatch{stdout: &skifftest.SyncBuffer{}, stderr: &skifftest.SyncBuffer{}}
	cmd.Stdout, cmd.Stderr = w.stdout, w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	w.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}
	t.Cleanup(w.stop)
	eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("kubectl get --watch-only exited:\n%s%s", w.stdout, w.stderr)
		default:
		}
		scanner := bufio.NewScanner(strings.NewReader(w.stderr.String()))
		for scanner.Scan() {
			if line := scanner.Text(); strings.Contains(line, "watch=true") && strings.Contains(line, " 200 OK") {
				return true, ""
			}
		}
		return false, "no answered watch request in kubectl's log:\n" + w.stderr.String()
	})
	return w
}
