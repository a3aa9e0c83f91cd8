// Package readme runs the README's walk-through as a reader would: every ```sh block
// of its "## Walk-through" section, one command line at a time, with bash and the real
// /usr/bin/kubectl, against the skiff binary `make run` starts (the process runtime, its
// own data directory and free ports). A command that exits non-zero fails the test with
// the command, its README line and its output.
//
// The README's convention for those blocks: every line is a command, except blank lines
// and lines that start with "#" (comments, and expected output written as "# ...").
// A line ending in a backslash continues on the next. Each command runs in a fresh bash
// (-e -o pipefail), so no shell variable carries from one line to the next.
package readme

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"skiff.dev/tests/internal/skifftest"
)

// skiffBinary is built once by TestMain.
var skiffBinary string

func TestMain(m *testing.M) { skifftest.Main(m, &skiffBinary) }

const (
	readmePath = "../../README.md"
	// section is the README heading whose ```sh blocks are run.
	section = "## Walk-through"
	// fence opens the blocks that are run; other blocks (```console, ``` ...) are not.
	fence = "```sh"
	// commandTimeout bounds one command line; the walk-through waits with
	// `kubectl wait --timeout=60s` and the like, well within it.
	commandTimeout = 2 * time.Minute
)

// command is one command line of the walk-through.
type command struct {
	line int // in the README, 1-based: where the command starts
	text string
}

func (c command) String() string { return fmt.Sprintf("README.md:%d: %s", c.line, c.text) }

// walkthrough returns the commands of the ```sh blocks under the heading, in order: the
// section runs from the heading's line to the next heading of the same or a higher level
// outside a code block.
func walkthrough(markdown, heading string) ([]command, error) {
	level := strings.Index(heading, " ") // "## X" → 2
	if level < 1 || strings.Trim(heading[:level], "#") != "" {
		return nil, fmt.Errorf("%q is not a markdown heading", heading)
	}
	var (
		cmds      []command
		found     bool
		inSection bool
		inBlock   bool // any fenced block
		runBlock  bool // a ```sh block of the section
		pending   *command
	)
	scanner := bufio.NewScanner(strings.NewReader(markdown))
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if inBlock {
				if pending != nil {
					return nil, fmt.Errorf("README.md:%d: the block ends inside a continued line", n)
				}
				inBlock, runBlock = false, false
			} else {
				inBlock = true
				runBlock = inSection && trimmed == fence
			}
			continue
		}
		if inBlock {
			if !runBlock {
				continue
			}
			if pending == nil && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
				continue
			}
			if strings.Contains(line, "<<") {
				return nil, fmt.Errorf("README.md:%d: a here-document cannot run line by line: %s", n, line)
			}
			text, continued := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`)
			if pending == nil {
				pending = &command{line: n}
			} else {
				pending.text += " "
			}
			pending.text += strings.TrimSpace(text)
			if !continued {
				cmds = append(cmds, *pending)
				pending = nil
			}
			continue
		}
		if hashes, _, ok := strings.Cut(line, " "); ok && hashes != "" && strings.Trim(hashes, "#") == "" {
			if line == heading {
				if found {
					return nil, fmt.Errorf("README.md:%d: a second %q", n, heading)
				}
				found, inSection = true, true
			} else if len(hashes) <= level {
				inSection = false
			}
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("no %q section", heading)
	}
	if inBlock {
		return nil, errors.New("a code block is not closed")
	}
	return cmds, nil
}

// run runs one command line with bash in dir, with env added to the test's environment,
// and returns its combined output; the error names the command and holds the output.
// The command and everything it started are killed when it runs past commandTimeout.
func run(dir string, env []string, c command) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", c.text)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = nil // /dev/null: nothing waits for a terminal
	// Its own process group, so that a timeout kills kubectl too, not only bash.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %s", commandTimeout)
	}
	if err != nil {
		return string(out), fmt.Errorf("%s: %v\n%s", c, err, out)
	}
	return string(out), nil
}

// TestWalkthrough starts skiff as `make run` does and runs the README's walk-through
// against it.
func TestWalkthrough(t *testing.T) {
	markdown, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := walkthrough(string(markdown), section)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 10 {
		t.Fatalf("the README's walk-through has %d commands; its ```sh blocks are not being found", len(cmds))
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatalf("the walk-through runs with bash, which is not on PATH: %v", err)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Fatalf("the walk-through drives the real kubectl, which is not on PATH: %v", err)
	}

	// As `make run`: the process runtime and the host's name as the node's; free ports
	// and a data directory of its own, and no proxy (its nftables table is host-wide).
	c := skifftest.Start(t, skiffBinary, "--runtime", "process")
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "KUBECACHEDIR=" + t.TempDir()}
	dir := t.TempDir()
	for _, cmd := range cmds {
		t.Logf("$ %s", cmd.text)
		out, err := run(dir, env, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if out != "" {
			t.Logf("%s", strings.TrimRight(out, "\n"))
		}
	}
}

// TestAFailingCommandFails checks that the walk-through can fail: a command that exits
// non-zero, anywhere in a pipeline, is an error naming it and holding its output.
func TestAFailingCommandFails(t *testing.T) {
	dir := t.TempDir()
	for _, text := range []string{
		"echo partial output; exit 3",
		"echo partial output; false | cat",
		"kubectl --no-such-flag",
	} {
		c := command{line: 7, text: text}
		out, err := run(dir, nil, c)
		if err == nil {
			t.Errorf("%q: no error, output %q", text, out)
			continue
		}
		if !strings.Contains(err.Error(), "README.md:7: "+text) {
			t.Errorf("%q: the error does not name the command: %v", text, err)
		}
		if strings.Contains(text, "partial") && !strings.Contains(err.Error(), "partial output") {
			t.Errorf("%q: the error does not hold the output: %v", text, err)
		}
	}
	if _, err := run(dir, []string{"WALKTHROUGH_VAR=x"}, command{line: 1, text: `test "$WALKTHROUGH_VAR" = x`}); err != nil {
		t.Errorf("the environment does not reach the command: %v", err)
	}
}

// TestWalkthroughExtraction checks which lines of a README count as commands.
func TestWalkthroughExtraction(t *testing.T) {
	const markdown = "# Title\n" +
		"```sh\nnot-run-before-the-section\n```\n" +
		"## Walk-through\n" +
		"Text.\n" +
		"```sh\n" +
		"first --flag   # a trailing comment stays for bash\n" +
		"# expected output\n" +
		"\n" +
		"second \\\n  --continued\n" +
		"```\n" +
		"```console\nnot-run-console\n```\n" +
		"### A subsection\n" +
		"```sh\n# only a comment\nthird\n```\n" +
		"## Next section\n" +
		"```sh\nnot-run-after\n```\n"
	cmds, err := walkthrough(markdown, "## Walk-through")
	if err != nil {
		t.Fatal(err)
	}
	want := []command{
		{line: 8, text: "first --flag   # a trailing comment stays for bash"},
		{line: 11, text: "second --continued"},
		{line: 20, text: "third"},
	}
	if fmt.Sprint(cmds) != fmt.Sprint(want) {
		t.Errorf("got\n%v\nwant\n%v", cmds, want)
	}
	for name, bad := range map[string]string{
		"no section":     "# Title\n```sh\nx\n```\n",
		"here-document":  "## Walk-through\n```sh\ncat <<EOF\n```\n",
		"unclosed block": "## Walk-through\n```sh\nx\n",
		"dangling \\":    "## Walk-through\n```sh\nx \\\n```\n",
	} {
		if _, err := walkthrough(bad, "## Walk-through"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
