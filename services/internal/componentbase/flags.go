package componentbase

import (
	"flag"
	"strings"
)

// FlagDefaults is fs's flags as `-h` prints them (flag.FlagSet.PrintDefaults: each
// name, type, usage and default), for tests that hold a component's flags to those
// its users rely on.
func FlagDefaults(fs *flag.FlagSet) string {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	defer fs.SetOutput(out)
	fs.PrintDefaults()
	return b.String()
}
