// Command attacker makes the attempts of package attack from where it runs: the compose
// suite copies it into a node's container and runs it there, so each attempt uses what
// that node holds and reaches what that node reaches. It reads a JSON plan ([]Attempt)
// on stdin and writes the verdicts ([]Verdict) as JSON on stdout.
package main

import (
	"context"
	"fmt"
	"os"

	"skiff.dev/tests/security/attack"
)

func main() {
	var plan []attack.Attempt
	if err := attack.Decode(os.Stdin, &plan); err != nil {
		fmt.Fprintln(os.Stderr, "attacker: plan:", err)
		os.Exit(2)
	}
	if err := attack.Encode(os.Stdout, attack.RunAll(context.Background(), plan)); err != nil {
		fmt.Fprintln(os.Stderr, "attacker:", err)
		os.Exit(1)
	}
}
