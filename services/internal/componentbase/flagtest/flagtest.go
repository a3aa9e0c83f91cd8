// Package flagtest holds a component's flags to those its users rely on: the names,
// types, defaults and usages `-h` printed, kept in a golden file.
package flagtest

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// Golden fails t unless fs prints, as `-h` does (flag.FlagSet.PrintDefaults), exactly
// the golden file's text: the command's -h output without its "Usage of" line.
func Golden(t testing.TB, fs *flag.FlagSet, golden string) {
	t.Helper()
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	fs.SetOutput(&got)
	fs.PrintDefaults()
	if got.String() != string(want) {
		t.Errorf("flags differ from %s; got:\n%s", golden, got.String())
	}
}

// Parse registers flags with addFlags (an Options.AddFlags) on a new FlagSet and parses
// args into them, failing t on a parse error: how a test sets Options as a command
// line would.
func Parse(t testing.TB, addFlags func(*flag.FlagSet), args ...string) {
	t.Helper()
	fs := flag.NewFlagSet(t.Name(), flag.ContinueOnError)
	addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
}
