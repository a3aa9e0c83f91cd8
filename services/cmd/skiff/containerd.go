package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"skiff.dev/services/cri/containerd"
	"skiff.dev/services/internal/componentbase"
)

// containerdMain runs `skiff containerd`: a private containerd for a kubelet that runs
// apart from the all-in-one (a second node on the same host), as the all-in-one starts
// its own with --runtime containerd: its config, socket, state and CNI configuration
// under --dir, pods on the Linux bridge --bridge with the pod CIDR the kubelet gives
// through CRI. It prints the CRI endpoint ("endpoint: unix://<dir>/containerd.sock"),
// then runs until SIGINT or SIGTERM, when it removes every pod sandbox, stops
// containerd and its shims and deletes the bridge. Needs root, containerd, runc and
// the CNI plugins (scripts/install-containerd.sh).
func containerdMain(args []string) int {
	var cfg containerd.Config
	if err := containerdFlags(&cfg).Parse(args); err != nil {
		return 2
	}
	if cfg.Dir == "" {
		fmt.Fprintln(os.Stderr, "usage: skiff containerd --dir DIR [--bridge skiff0] [--pod-infra-container-image IMAGE]")
		return 2
	}
	cfg.Logger = slog.Default().With("component", "containerd")
	return componentbase.Main(cfg.Logger, func(ctx context.Context) error {
		d, err := containerd.Start(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("endpoint: %s\n", d.Endpoint())
		<-ctx.Done()
		d.Stop()
		return nil
	})
}

// containerdFlags are `skiff containerd`'s flags, filling cfg.
func containerdFlags(cfg *containerd.Config) *flag.FlagSet {
	fs := flag.NewFlagSet("skiff containerd", flag.ContinueOnError)
	fs.StringVar(&cfg.Dir, "dir", "", "directory of the containerd's config, socket, state and CNI configuration (required)")
	fs.StringVar(&cfg.Bridge, "bridge", containerd.DefaultBridge, "Linux bridge the pods attach to; each containerd on a host needs its own")
	fs.StringVar(&cfg.SandboxImage, "pod-infra-container-image", containerd.DefaultSandboxImage, "pod sandbox (pause) image, present in the k8s.io namespace")
	return fs
}
