package serving_test

import (
	"context"
	"flag"
	"fmt"
	"os"

	"skiff.dev/services/internal/serving"
)

// Example is the shape every skiff main has: the shared flags beside the service's own,
// one logger, one health/metrics/pprof listener.
func Example() {
	fs := flag.NewFlagSet("scheduler", flag.ExitOnError)
	srv := serving.NewOptions(":10259") // the service's default --health-address
	srv.AddFlags(fs)
	_ = fs.Parse([]string{"--health-address=127.0.0.1:0", "--log-format=text"})

	logger := srv.Logger("scheduler") // exits 2 on a bad --log-level or --log-format
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// The service's collectors go into the registry; checks into /healthz or /readyz.
	ready := func() error { return nil }
	addrs, err := srv.Start(ctx, serving.NewRegistry(), serving.WithReadiness(ready))
	if err != nil {
		logger.Error("health endpoints", "err", err)
		os.Exit(1)
	}
	fmt.Println(addrs.Health != nil)
	// Output: true
}
