// Command report turns the JUnit XML reports of Kubernetes e2e conformance
// runs into a markdown summary (docs/conformance.md).
//
// The reports are the ones ginkgo v2 writes for e2e.test, either with
// --ginkgo.junit-report=FILE or as junit_01.xml under --report-dir:
//
//	cd tests
//	go run ./conformance/report -out ../docs/conformance.md -total 411 \
//		-k8s-version v1.32.4 -commit "$(git rev-parse HEAD)" \
//		-header run.md -reasons reasons.tsv junit_parallel.xml junit_serial.xml
//
// Flags:
//
//	-out FILE          markdown to write; "-" (the default) is stdout
//	-total N           [Conformance] specs in the Kubernetes version (411 for v1.32)
//	-reasons FILE      lines "REGEXP<TAB>REASON" (# comments); a failed or skipped
//	                   spec whose name matches gets the first matching reason
//	-header FILE       markdown inserted after the title
//	-expect FILE       spec names, one a line (# comments), that must have passed;
//	                   any that did not are listed on stderr and the exit status is 1
//	-k8s-version V     Kubernetes version, printed
//	-commit SHA        skiff commit, printed
//
// Only test cases whose name contains "[Conformance]" count, so ginkgo's
// pseudo cases ([SynchronizedBeforeSuite], [ReportAfterSuite] ...) and other
// specs are ignored. Names are normalised to the form conformance.yaml uses:
// a leading "[It] " and a trailing label list ("[sig-node, Conformance]",
// written when labels are not omitted) are dropped.
//
// Statuses: passed; failed, panicked, timedout, interrupted and aborted count
// as failed; skipped and pending as not run; any other status goes by the
// case's <failure>, <error> or <skipped> element. A failed spec is listed
// with its -reasons reason, else with the first paragraph of its failure
// message on one line, cut at 200 characters (prefixed by the status when it
// is not "failed").
//
// A spec found in several reports keeps the later report's entry, except
// that a skipped entry never replaces one that ran. "Not run" is -total
// minus passed minus failed: the specs the focus skipped and the ones absent
// from the reports (the per-SIG table counts only the skipped ones).
//
// The exit status is 0, or 1 when a report, -reasons, -header or -expect
// cannot be read or parsed, or when -expect names a spec that did not pass;
// 2 for bad usage.
package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// outcome is what a spec's status counts as.
type outcome int

const (
	notRun outcome = iota
	passed
	failed
)

// spec is one [Conformance] test case, after normalisation.
type spec struct {
	name    string
	status  string // ginkgo's status, e.g. "timedout"
	outcome outcome
	seconds float64
	message string // failure summary, one line, unescaped
}

// JUnit XML as ginkgo v2 writes it; the root is <testsuites> or <testsuite>.
type xmlDoc struct {
	XMLName   xml.Name
	Timestamp string     `xml:"timestamp,attr"`
	Suites    []xmlSuite `xml:"testsuite"`
	Cases     []xmlCase  `xml:"testcase"`
}

type xmlSuite struct {
	Timestamp string    `xml:"timestamp,attr"`
	Cases     []xmlCase `xml:"testcase"`
}

type xmlCase struct {
	Name    string      `xml:"name,attr"`
	Status  string      `xml:"status,attr"`
	Time    float64     `xml:"time,attr"`
	Failure *xmlMessage `xml:"failure"`
	Error   *xmlMessage `xml:"error"`
	Skipped *xmlMessage `xml:"skipped"`
}

type xmlMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// reason is one line of the -reasons file.
type reason struct {
	re   *regexp.Regexp
	text string
}

// options holds the flags.
type options struct {
	out, reasons, header, expect string
	total                        int
	k8sVersion, commit           string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.out, "out", "-", `markdown file to write; "-" is stdout`)
	fs.IntVar(&o.total, "total", 411, "number of [Conformance] specs in the Kubernetes version")
	fs.StringVar(&o.reasons, "reasons", "", `file of "REGEXP<TAB>REASON" lines naming known causes`)
	fs.StringVar(&o.header, "header", "", "markdown file inserted after the title")
	fs.StringVar(&o.expect, "expect", "", "file of spec names that must have passed")
	fs.StringVar(&o.k8sVersion, "k8s-version", "", "Kubernetes version of the e2e suite, e.g. v1.32.4")
	fs.StringVar(&o.commit, "commit", "", "skiff commit that was tested")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: report [flags] JUNIT.xml [JUNIT.xml ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 || o.total < 0 {
		fs.Usage()
		return 2
	}

	specs := map[string]spec{}
	var start time.Time
	for _, path := range fs.Args() {
		got, ts, err := readReport(path)
		if err != nil {
			fmt.Fprintf(stderr, "report: %v\n", err)
			return 1
		}
		if len(got) == 0 {
			fmt.Fprintf(stderr, "report: warning: %s has no [Conformance] test cases\n", path)
		}
		merge(specs, got)
		if !ts.IsZero() && (start.IsZero() || ts.Before(start)) {
			start = ts
		}
	}

	var reasons []reason
	if o.reasons != "" {
		var err error
		if reasons, err = readReasons(o.reasons); err != nil {
			fmt.Fprintf(stderr, "report: %v\n", err)
			return 1
		}
	}
	var header string
	if o.header != "" {
		b, err := os.ReadFile(o.header)
		if err != nil {
			fmt.Fprintf(stderr, "report: header: %v\n", err)
			return 1
		}
		header = strings.TrimSpace(string(b))
	}
	var expect []string
	if o.expect != "" {
		var err error
		if expect, err = readNames(o.expect); err != nil {
			fmt.Fprintf(stderr, "report: expect: %v\n", err)
			return 1
		}
	}

	var files []string
	for _, path := range fs.Args() {
		files = append(files, filepath.Base(path))
	}
	md := render(o, header, files, start, specs, reasons, stderr)
	if o.out == "-" {
		if _, err := stdout.Write(md); err != nil {
			fmt.Fprintf(stderr, "report: writing stdout: %v\n", err)
			return 1
		}
	} else if err := os.WriteFile(o.out, md, 0o644); err != nil {
		fmt.Fprintf(stderr, "report: %v\n", err)
		return 1
	}

	if misses := checkExpect(expect, specs); len(misses) > 0 {
		fmt.Fprintf(stderr, "report: %d of the %d specs in %s did not pass:\n", len(misses), len(expect), o.expect)
		for _, m := range misses {
			fmt.Fprintf(stderr, "  %s\n", m)
		}
		return 1
	}
	return 0
}

// readReport parses one JUnit file and returns its [Conformance] specs, in
// file order, and the earliest suite timestamp (zero if none).
func readReport(path string) ([]spec, time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, time.Time{}, err
	}
	specs, ts, err := parseReport(b)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("%s: %w", path, err)
	}
	return specs, ts, nil
}

// parseReport is readReport on the file's contents.
func parseReport(b []byte) ([]spec, time.Time, error) {
	var doc xmlDoc
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, time.Time{}, fmt.Errorf("parsing JUnit XML: %w", err)
	}
	var suites []xmlSuite
	switch doc.XMLName.Local {
	case "testsuites":
		suites = doc.Suites
	case "testsuite":
		suites = []xmlSuite{{Timestamp: doc.Timestamp, Cases: doc.Cases}}
	default:
		return nil, time.Time{}, fmt.Errorf("root element <%s>, want <testsuites> or <testsuite>", doc.XMLName.Local)
	}
	var specs []spec
	var start time.Time
	for _, s := range suites {
		if ts := parseTimestamp(s.Timestamp); !ts.IsZero() && (start.IsZero() || ts.Before(start)) {
			start = ts
		}
		for _, c := range s.Cases {
			if sp, ok := toSpec(c); ok {
				specs = append(specs, sp)
			}
		}
	}
	return specs, start, nil
}

// parseTimestamp reads ginkgo's suite timestamp; ginkgo writes year 1 when
// it has none, which is returned as the zero time.
func parseTimestamp(s string) time.Time {
	for _, layout := range []string{"2006-01-02T15:04:05", time.RFC3339Nano} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			if t.Year() <= 1 {
				return time.Time{}
			}
			return t
		}
	}
	return time.Time{}
}

// suiteNodes are the leaf node types of ginkgo's pseudo test cases.
var suiteNodes = []string{"[BeforeSuite]", "[SynchronizedBeforeSuite]", "[AfterSuite]",
	"[SynchronizedAfterSuite]", "[ReportBeforeSuite]", "[ReportAfterSuite]", "[DeferCleanup (Suite)]"}

// toSpec converts a test case; ok is false for cases that are not
// [Conformance] specs.
func toSpec(c xmlCase) (spec, bool) {
	for _, p := range suiteNodes {
		if strings.HasPrefix(strings.TrimSpace(c.Name), p) {
			return spec{}, false
		}
	}
	name := canonicalName(c.Name)
	if !strings.Contains(name, "[Conformance]") {
		return spec{}, false
	}
	sp := spec{name: name, status: c.Status, seconds: c.Time}
	switch c.Status {
	case "passed":
		sp.outcome = passed
	case "failed", "panicked", "timedout", "interrupted", "aborted":
		sp.outcome = failed
	case "skipped", "pending":
		sp.outcome = notRun
	default:
		// Not ginkgo, or a status it did not have: go by the child elements.
		switch {
		case c.Failure != nil || c.Error != nil:
			sp.outcome = failed
		case c.Skipped != nil:
			sp.outcome = notRun
		default:
			sp.outcome = passed
		}
		if sp.status == "" {
			sp.status = [...]string{notRun: "skipped", passed: "passed", failed: "failed"}[sp.outcome]
		}
	}
	if sp.outcome == failed {
		sp.message = failureSummary(c)
	}
	return sp, true
}

// canonicalName drops the "[It] " ginkgo puts before a spec's text and the
// label list ("[sig-node, Conformance]") it may put after it.
func canonicalName(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimSpace(strings.TrimPrefix(s, "[It] "))
	if strings.HasSuffix(s, "]") {
		if i := strings.LastIndex(s, " ["); i >= 0 && strings.Contains(s[i:], ", ") {
			s = strings.TrimSpace(s[:i])
		}
	}
	return s
}

// merge adds a report's specs: a later entry wins unless it did not run and
// the earlier one did.
func merge(into map[string]spec, specs []spec) {
	for _, sp := range specs {
		if old, ok := into[sp.name]; ok && old.outcome != notRun && sp.outcome == notRun {
			continue
		}
		into[sp.name] = sp
	}
}

// failMarker is the "[FAILED] " ginkgo puts before a failure's text.
var failMarker = regexp.MustCompile(`^\[(FAILED|TIMEDOUT|PANICKED|INTERRUPTED|ABORTED)\]\s*`)

// failureSummary is the first paragraph of a failed case's message as one
// line, without ginkgo's "In [It] at: file:line" lines. Kubernetes' own
// junit_01.xml omits the message attribute, so the element's text is used
// when the attribute is empty or only repeats the type ("interrupted").
func failureSummary(c xmlCase) string {
	for _, m := range []*xmlMessage{c.Failure, c.Error} {
		if m == nil {
			continue
		}
		for _, text := range []string{m.Message, m.Text} {
			if text == m.Type && text != "" {
				continue
			}
			if s := firstParagraph(text); s != "" {
				return s
			}
		}
	}
	return ""
}

// firstParagraph joins the lines up to the first blank one.
func firstParagraph(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "In [") && strings.Contains(line, "] at: ") {
			if len(out) > 0 {
				break
			}
			continue
		}
		out = append(out, line)
	}
	s = failMarker.ReplaceAllString(strings.Join(out, " "), "")
	return strings.Join(strings.Fields(s), " ")
}

// readReasons reads the -reasons file.
func readReasons(path string) ([]reason, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reasons: %w", err)
	}
	defer f.Close()
	var reasons []reason
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if t := strings.TrimSpace(line); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		pattern, text, ok := strings.Cut(line, "\t")
		pattern, text = strings.TrimSpace(pattern), strings.TrimSpace(text)
		if !ok || pattern == "" || text == "" {
			return nil, fmt.Errorf("%s:%d: want REGEXP<TAB>REASON", path, n)
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		reasons = append(reasons, reason{re: re, text: text})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reasons, nil
}

// reasonFor returns the first matching reason, or "".
func reasonFor(reasons []reason, name string) string {
	for _, r := range reasons {
		if r.re.MatchString(name) {
			return r.text
		}
	}
	return ""
}

// readNames reads a file of spec names, one a line, # comments.
func readNames(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		names = append(names, canonicalName(line))
	}
	if len(names) == 0 {
		return nil, errors.New(path + ": no spec names")
	}
	return names, nil
}

// checkExpect returns "NAME: STATUS" for each expected spec that did not pass.
func checkExpect(expect []string, specs map[string]spec) []string {
	var misses []string
	for _, name := range expect {
		sp, ok := specs[name]
		switch {
		case !ok:
			misses = append(misses, name+": missing")
		case sp.outcome != passed:
			misses = append(misses, name+": "+sp.status)
		}
	}
	return misses
}

// sigOf returns the "sig-xxx" a name starts with, or "other".
func sigOf(name string) string {
	if strings.HasPrefix(name, "[sig-") {
		if i := strings.Index(name, "]"); i > 0 {
			return name[1:i]
		}
	}
	return "other"
}

// counts per SIG.
type counts struct{ passed, failed, notRun int }

// render writes the markdown; warnings go to stderr.
func render(o options, header string, files []string, start time.Time, specs map[string]spec, reasons []reason, stderr io.Writer) []byte {
	names := make([]string, 0, len(specs))
	for name := range specs {
		names = append(names, name)
	}
	sort.Strings(names)

	bySIG := map[string]*counts{}
	var all counts
	var ran float64
	for _, name := range names {
		sp := specs[name]
		sig := sigOf(name)
		if bySIG[sig] == nil {
			bySIG[sig] = &counts{}
		}
		c := bySIG[sig]
		switch sp.outcome {
		case passed:
			c.passed++
			all.passed++
			ran += sp.seconds
		case failed:
			c.failed++
			all.failed++
			ran += sp.seconds
		default:
			c.notRun++
			all.notRun++
		}
	}
	total := o.total
	if present := all.passed + all.failed + all.notRun; total < present {
		fmt.Fprintf(stderr, "report: warning: -total %d is below the %d [Conformance] specs in the reports; using %d\n", total, present, present)
		total = present
	}
	notRunAll := total - all.passed - all.failed
	sigs := make([]string, 0, len(bySIG))
	for sig := range bySIG {
		sigs = append(sigs, sig)
	}
	sort.Strings(sigs)

	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# Kubernetes conformance\n\n")
	version := "Kubernetes"
	if o.k8sVersion != "" {
		version += " " + o.k8sVersion
	}
	p("skiff passes %d of the %d [Conformance] tests of %s (%d failed, %d not run).\n\n",
		all.passed, total, version, all.failed, notRunAll)
	if header != "" {
		p("%s\n\n", header)
	}
	if !start.IsZero() {
		p("- Run on: %s\n", start.Format("2006-01-02"))
	}
	p("- Time in the specs that ran: %s (summed over specs)\n", time.Duration(ran*float64(time.Second)).Round(time.Second))
	if o.commit != "" {
		p("- skiff commit: `%s`\n", o.commit)
	}
	p("- Reports: %s\n\n", strings.Join(files, ", "))

	p("## By SIG\n\n")
	p("| SIG | passed | failed | not run in this report |\n")
	p("|---|---:|---:|---:|\n")
	for _, sig := range sigs {
		c := bySIG[sig]
		p("| %s | %d | %d | %d |\n", sig, c.passed, c.failed, c.notRun)
	}
	p("| **total** | %d | %d | %d |\n\n", all.passed, all.failed, all.notRun)

	p("## Failed\n\n")
	if all.failed == 0 {
		p("None.\n\n")
	}
	for _, sig := range sigs {
		if bySIG[sig].failed == 0 {
			continue
		}
		p("### %s\n\n", sig)
		p("| test | time | reason |\n")
		p("|---|---:|---|\n")
		for _, name := range names {
			sp := specs[name]
			if sp.outcome != failed || sigOf(name) != sig {
				continue
			}
			why := reasonFor(reasons, name)
			if why != "" {
				why = strings.ReplaceAll(why, "|", `\|`)
			} else {
				why = escape(truncate(sp.message, 200))
				if sp.status != "failed" {
					why = strings.TrimSpace(sp.status + ": " + why)
				}
			}
			p("| %s | %ss | %s |\n", codeSpan(name, true), strconv.FormatFloat(sp.seconds, 'f', 1, 64), why)
		}
		p("\n")
	}

	p("## Not run\n\n")
	byReason := map[string][]string{}
	listed := 0
	for _, name := range names {
		if specs[name].outcome != notRun {
			continue
		}
		if why := reasonFor(reasons, name); why != "" {
			byReason[why] = append(byReason[why], name)
			listed++
		}
	}
	whys := make([]string, 0, len(byReason))
	for why := range byReason {
		whys = append(whys, why)
	}
	sort.Strings(whys)
	for _, why := range whys {
		p("### %s\n\n", why)
		for _, name := range byReason[why] {
			p("- %s\n", codeSpan(name, false))
		}
		p("\n")
	}
	switch rest := notRunAll - listed; {
	case notRunAll == 0:
		p("All %d specs ran.\n", total)
	case rest > 0:
		p("%d other specs did not run and have no listed reason (%d skipped in these reports, %d absent from them).\n",
			rest, all.notRun-listed, notRunAll-all.notRun)
	}
	return b.Bytes()
}

// truncate shortens s to n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n])) + "…"
}

// mdEscaper escapes text for a markdown table cell.
var mdEscaper = strings.NewReplacer(
	`\`, `\\`, "`", "\\`", "|", `\|`, "*", `\*`, "_", `\_`, "<", `\<`,
	"\r\n", " ", "\n", " ", "\r", " ",
)

// escape makes text safe in a markdown table cell.
func escape(s string) string { return mdEscaper.Replace(s) }

// codeSpan quotes a name as inline code; in a table "|" must be escaped.
func codeSpan(s string, inTable bool) string {
	s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	if inTable {
		s = strings.ReplaceAll(s, "|", `\|`)
	}
	if strings.Contains(s, "`") {
		return "`` " + s + " ``"
	}
	return "`" + s + "`"
}
