package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"skiff.dev/services/allinone"
)

// kubeDNSMain runs `skiff kube-dns`: it publishes a CoreDNS that does not run as a pod
// (compose's coredns container) as kube-system/kube-dns, the Service at
// allinone.KubeDNSServiceIP with Endpoints and an EndpointSlice naming --endpoint (a
// host name, resolved here, or an IP) at --port, as the all-in-one does for its own
// CoreDNS. It retries for up to a minute while the apiserver or the name is not there.
func kubeDNSMain(args []string) int {
	fs := flag.NewFlagSet("skiff kube-dns", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of a user that may write Services and endpoints in kube-system")
	endpoint := fs.String("endpoint", "", "host name or IPv4 address CoreDNS answers on")
	port := fs.Int("port", 53, "port CoreDNS answers on (UDP and TCP)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *kubeconfig == "" || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "usage: skiff kube-dns --kubeconfig PATH --endpoint HOST [--port 53]")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff kube-dns: %v\n", err)
		return 1
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff kube-dns: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ip, err := resolveIPv4(ctx, *endpoint)
		if err == nil {
			var serviceIP string
			if serviceIP, err = allinone.EnsureKubeDNS(ctx, client, ip, *port); err == nil {
				fmt.Printf("kube-system/kube-dns: %s:53 → %s:%d\n", serviceIP, ip, *port)
				return 0
			}
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "skiff kube-dns: %v\n", err)
			return 1
		case <-time.After(time.Second):
		}
	}
}

// resolveIPv4 returns host's first IPv4 address (host itself when it is one).
func resolveIPv4(ctx context.Context, host string) (string, error) {
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip4", host)
	if err != nil {
		return "", err
	}
	return ips[0].String(), nil
}
