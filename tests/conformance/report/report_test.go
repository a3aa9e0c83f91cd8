package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// junit wraps test cases in a report as ginkgo v2 writes it.
func junit(timestamp string, cases ...string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="1" disabled="0" errors="0" failures="0" time="1">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="1" skipped="0" errors="0" failures="0" time="1" timestamp="` + timestamp + `">
    <properties><property name="SuiteSucceeded" value="false"></property></properties>
` + strings.Join(cases, "\n") + `
  </testsuite>
</testsuites>
`
}

// tc is one <testcase>; inner is its child elements.
func tc(name, status, time, inner string) string {
	return `    <testcase name="` + name + `" classname="Kubernetes e2e suite" status="` + status + `" time="` + time + `">` + inner + `</testcase>`
}

const (
	podsA   = "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
	podsB   = "[sig-node] Pods should be updated [NodeConformance] [Conformance]"
	appsA   = "[sig-apps] Deployment should run the lifecycle of a Deployment [Conformance]"
	netA    = "[sig-network] DNS should provide DNS for services  [Conformance]"
	plainA  = "[sig-node] Pods should support pod readiness gates [NodeConformance]"
	skipped = `<skipped message="skipped"></skipped>`
)

func failure(msg string) string {
	return `<failure message="` + msg + `" type="failed">[FAILED] ` + msg + "&#xA;In [It] at: pods.go:1 @ 01/02/25 10:00:00&#xA;</failure>"
}

func TestRun(t *testing.T) {
	tests := []struct {
		name    string
		files   []string // JUnit reports, in argument order
		reasons string
		expect  string
		flags   []string
		code    int
		lines   []string // must each be a line of the markdown
		absent  []string // must not occur in the markdown
		stderr  []string // must occur in stderr
	}{
		{
			name: "merge across two files",
			files: []string{
				junit("2025-01-02T10:00:00",
					tc(podsA, "skipped", "0", skipped),
					tc(podsB, "failed", "3", failure("first try")),
					tc(appsA, "passed", "4", ""),
					tc(netA, "failed", "2", failure("dns down"))),
				junit("2025-01-03T11:00:00",
					tc(podsA, "passed", "1.5", ""),
					tc(podsB, "passed", "2", ""),
					tc(appsA, "skipped", "0", skipped),
					tc(netA, "skipped", "0", skipped)),
			},
			flags: []string{"-total", "10"},
			lines: []string{
				"skiff passes 3 of the 10 [Conformance] tests of Kubernetes (1 failed, 6 not run).",
				"- Run on: 2025-01-02",
				"- Time in the specs that ran: 10s (summed over specs)",
				"- Reports: a.xml, b.xml",
				"| sig-apps | 1 | 0 | 0 |",
				"| sig-network | 0 | 1 | 0 |",
				"| sig-node | 2 | 0 | 0 |",
				"| **total** | 3 | 1 | 0 |",
				"| `" + netA + "` | 2.0s | dns down |",
				"6 other specs did not run and have no listed reason (0 skipped in these reports, 6 absent from them).",
			},
			absent: []string{"first try"},
		},
		{
			name: "pseudo test cases and non-conformance specs are ignored",
			files: []string{junit("0001-01-01T00:00:00",
				tc("[SynchronizedBeforeSuite]", "failed", "1", failure("suite setup [Conformance]")),
				tc("[ReportAfterSuite] Kubernetes e2e suite report", "passed", "0", ""),
				tc("[It] "+plainA, "failed", "1", failure("not conformance")),
				tc("[It] "+podsA+" [sig-node, NodeConformance, Conformance]", "passed", "1", ""))},
			flags: []string{"-total", "2", "-k8s-version", "v1.32.4", "-commit", "abc123"},
			lines: []string{
				"skiff passes 1 of the 2 [Conformance] tests of Kubernetes v1.32.4 (0 failed, 1 not run).",
				"- skiff commit: `abc123`",
				"| sig-node | 1 | 0 | 0 |",
				"| **total** | 1 | 0 | 0 |",
				"None.",
			},
			absent: []string{"Run on", "suite setup", "not conformance", "readiness", "[It]", "NodeConformance, Conformance"},
		},
		{
			name: "status mapping",
			files: []string{junit("2025-01-02T10:00:00",
				tc("[sig-a] panics [Conformance]", "panicked", "1", `<error message="runtime error: nil map" type="panicked">[PANICKED] x</error>`),
				tc("[sig-a] times out [Conformance]", "timedout", "1", `<failure message="" type="timedout">[TIMEDOUT] A suite timeout occurred&#xA;In [It] at: a.go:1 @ 01/02/25&#xA;&#xA;stack</failure>`),
				tc("[sig-a] is interrupted [Conformance]", "interrupted", "1", `<error message="interrupted" type="interrupted">Interrupted by User&#xA;&#xA;goroutines</error>`),
				tc("[sig-a] aborts [Conformance]", "aborted", "1", `<failure message="abort!" type="aborted">x</failure>`),
				tc("[sig-a] fails without attribute [Conformance]", "failed", "1", `<failure type="failed">[FAILED] Expected&#xA;    &lt;int&gt;: 1&#xA;to equal&#xA;    &lt;int&gt;: 2&#xA;In [It] at: a.go:9 @ 01/02/25</failure>`),
				tc("[sig-a] is pending [Conformance]", "pending", "0", `<skipped message="pending"></skipped>`),
				tc("[sig-a] passes [Conformance]", "passed", "1", ""),
				tc("[sig-a] is skipped [Conformance]", "skipped", "0", skipped),
				tc("no sig [Conformance]", "passed", "1", ""))},
			flags: []string{"-total", "411"},
			lines: []string{
				"skiff passes 2 of the 411 [Conformance] tests of Kubernetes (5 failed, 404 not run).",
				"| other | 1 | 0 | 0 |",
				"| sig-a | 1 | 5 | 2 |",
				"### sig-a",
				"| `[sig-a] aborts [Conformance]` | 1.0s | aborted: abort! |",
				"| `[sig-a] fails without attribute [Conformance]` | 1.0s | Expected \\<int>: 1 to equal \\<int>: 2 |",
				"| `[sig-a] is interrupted [Conformance]` | 1.0s | interrupted: Interrupted by User |",
				"| `[sig-a] panics [Conformance]` | 1.0s | panicked: runtime error: nil map |",
				"| `[sig-a] times out [Conformance]` | 1.0s | timedout: A suite timeout occurred |",
				"404 other specs did not run and have no listed reason (2 skipped in these reports, 402 absent from them).",
			},
		},
		{
			name: "reasons, first match wins",
			files: []string{junit("2025-01-02T10:00:00",
				tc(podsA, "failed", "5", failure("image pull failed")),
				tc(podsB, "skipped", "0", skipped),
				tc(appsA, "skipped", "0", skipped),
				tc(netA, "skipped", "0", skipped))},
			reasons: "# known causes\n\n" +
				"host IP\tpods get no host IP yet | see #12\n" +
				"sig-node\tnode image cannot be built offline\n" +
				"Pods\tnever used: the line above matches first\n" +
				"Deployment\tdeployments are not served\n",
			flags: []string{"-total", "4"},
			lines: []string{
				"| `" + podsA + "` | 5.0s | pods get no host IP yet \\| see #12 |",
				"### deployments are not served",
				"- `" + appsA + "`",
				"### node image cannot be built offline",
				"- `" + podsB + "`",
				"1 other specs did not run and have no listed reason (1 skipped in these reports, 0 absent from them).",
			},
			absent: []string{"image pull failed", "never used", netA},
		},
		{
			name: "expect misses exit 1",
			files: []string{junit("2025-01-02T10:00:00",
				tc(podsA, "passed", "1", ""),
				tc(podsB, "failed", "1", failure("boom")),
				tc(appsA, "skipped", "0", skipped))},
			expect: "# CI slice\n" + podsA + "\n[It] " + podsB + "\n" + appsA + "\n" + netA + "\n",
			code:   1,
			lines:  []string{"skiff passes 1 of the 411 [Conformance] tests of Kubernetes (1 failed, 409 not run)."},
			stderr: []string{
				"did not pass:\n  " + podsB + ": failed\n  " + appsA + ": skipped\n  " + netA + ": missing\n",
			},
		},
		{
			name:   "expect met",
			files:  []string{junit("", tc(podsA, "passed", "1", ""))},
			expect: podsA + "\n",
			lines:  []string{"| sig-node | 1 | 0 | 0 |"},
		},
		{
			name: "markdown escaping",
			files: []string{junit("2025-01-02T10:00:00",
				tc("[sig-x] a|b `c` [Conformance]", "failed", "1.25",
					`<failure message="got | want `+"`x`"+` *y* a_b &lt;nil&gt;&#xA;second line" type="failed"></failure>`),
				tc("[sig-x] long [Conformance]", "failed", "1", failure(strings.Repeat("abcdefghij", 25))))},
			flags: []string{"-total", "2"},
			lines: []string{
				"| `` [sig-x] a\\|b `c` [Conformance] `` | 1.2s | got \\| want \\`x\\` \\*y\\* a\\_b \\<nil> second line |",
				"| `[sig-x] long [Conformance]` | 1.0s | " + strings.Repeat("abcdefghij", 20) + "… |",
			},
		},
		{
			name:   "malformed report",
			files:  []string{"<testsuites><testsuite>"},
			code:   1,
			stderr: []string{"a.xml: parsing JUnit XML"},
		},
		{
			name:   "not a JUnit report",
			files:  []string{"<html></html>"},
			code:   1,
			stderr: []string{"root element <html>"},
		},
		{
			name:    "bad reasons regexp",
			files:   []string{junit("", tc(podsA, "passed", "1", ""))},
			reasons: "ok\tfine\n(\tbroken\n",
			code:    1,
			stderr:  []string{"reasons.tsv:2: error parsing regexp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) string {
				path := filepath.Join(dir, name)
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				return path
			}
			args := append([]string{}, tt.flags...)
			if tt.reasons != "" {
				args = append(args, "-reasons", write("reasons.tsv", tt.reasons))
			}
			if tt.expect != "" {
				args = append(args, "-expect", write("expect.txt", tt.expect))
			}
			for i, f := range tt.files {
				args = append(args, write(string(rune('a'+i))+".xml", f))
			}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != tt.code {
				t.Fatalf("exit status %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			out := stdout.String()
			have := map[string]bool{}
			for _, line := range strings.Split(out, "\n") {
				have[line] = true
			}
			for _, want := range tt.lines {
				if !have[want] {
					t.Errorf("missing line %q in:\n%s", want, out)
				}
			}
			for _, bad := range tt.absent {
				if strings.Contains(out, bad) {
					t.Errorf("output contains %q:\n%s", bad, out)
				}
			}
			for _, want := range tt.stderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}

// TestGolden checks a whole document, with -header and -out.
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "junit_01.xml")
	header := filepath.Join(dir, "header.md")
	reasons := filepath.Join(dir, "reasons.tsv")
	out := filepath.Join(dir, "conformance.md")
	files := map[string]string{
		report: junit("2025-03-04T05:06:07",
			tc(podsA, "passed", "61.4", ""),
			tc(podsB, "failed", "12.34", failure("timed out waiting for the condition")),
			tc(appsA, "skipped", "0", skipped),
			tc(netA, "skipped", "0", skipped)),
		header:  "Run against a 3-node skiff cluster:\n\n    e2e.test --ginkgo.focus='\\[Conformance\\]'\n",
		reasons: "DNS\tno cluster DNS image offline\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	args := []string{"-out", out, "-total", "411", "-header", header, "-reasons", reasons,
		"-k8s-version", "v1.32.4", "-commit", "0123abc", report}
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d; stderr:\n%s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout not empty with -out: %q", stdout.String())
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Kubernetes conformance\n" +
		"\n" +
		"skiff passes 1 of the 411 [Conformance] tests of Kubernetes v1.32.4 (1 failed, 409 not run).\n" +
		"\n" +
		"Run against a 3-node skiff cluster:\n" +
		"\n" +
		"    e2e.test --ginkgo.focus='\\[Conformance\\]'\n" +
		"\n" +
		"- Run on: 2025-03-04\n" +
		"- Time in the specs that ran: 1m14s (summed over specs)\n" +
		"- skiff commit: `0123abc`\n" +
		"- Reports: junit_01.xml\n" +
		"\n" +
		"## By SIG\n" +
		"\n" +
		"| SIG | passed | failed | not run in this report |\n" +
		"|---|---:|---:|---:|\n" +
		"| sig-apps | 0 | 0 | 1 |\n" +
		"| sig-network | 0 | 0 | 1 |\n" +
		"| sig-node | 1 | 1 | 0 |\n" +
		"| **total** | 1 | 1 | 2 |\n" +
		"\n" +
		"## Failed\n" +
		"\n" +
		"### sig-node\n" +
		"\n" +
		"| test | time | reason |\n" +
		"|---|---:|---|\n" +
		"| `[sig-node] Pods should be updated [NodeConformance] [Conformance]` | 12.3s | timed out waiting for the condition |\n" +
		"\n" +
		"## Not run\n" +
		"\n" +
		"### no cluster DNS image offline\n" +
		"\n" +
		"- `[sig-network] DNS should provide DNS for services  [Conformance]`\n" +
		"\n" +
		"408 other specs did not run and have no listed reason (1 skipped in these reports, 407 absent from them).\n"
	if string(got) != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
