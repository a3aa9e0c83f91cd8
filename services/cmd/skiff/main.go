// Command skiff runs every skiff service in one process (package allinone) and prints the
// kubeconfig for kubectl; its subcommands set up the pieces of a cluster run apart.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"skiff.dev/services/allinone"
)

var subcommands = map[string]func(args []string) int{
	"pki":         pkiMain,
	"nats-config": func(args []string) int { return natsConfigMain(args, os.Stdout) },
	"kube-dns":    kubeDNSMain,
	"containerd":  containerdMain,
	"token":       func(args []string) int { return tokenMain(args, os.Stdout, os.Stderr) },
	"etcd":        func(args []string) int { return etcdMain(args, os.Stdout, os.Stderr) },
}

func main() {
	if len(os.Args) > 1 && subcommands[os.Args[1]] != nil {
		os.Exit(subcommands[os.Args[1]](os.Args[2:]))
	}
	o := allinone.NewOptions(cmp.Or(os.Getenv("SKIFF_DATA_DIR"), "./skiff-data"))
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	o.Logger()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "skiff: %v\n", err)
		os.Exit(1)
	}
}
