package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"

	"skiff.dev/services/internal/natsserver"
)

// natsConfigMain runs `skiff nats-config`: it writes to out the nats-server configuration file
// of a `skiff pki init` directory, the one the embedded server runs, for a nats-server
// (compose's nats:2.15.2) that finds nats-server.crt, nats-server.key and ca.crt under
// --cert-dir. Only the auth callout's public key is read from the PKI directory and
// written into it; nats-server needs neither the CA's key nor the callout's seed.
func natsConfigMain(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("skiff nats-config", flag.ContinueOnError)
	pkiDir := fs.String("pki-dir", "./skiff-data/pki", "`skiff pki init` directory whose nats-auth-callout.nk's public key the server trusts")
	certDir := fs.String("cert-dir", "", "directory holding nats-server.crt, nats-server.key and ca.crt as nats-server sees it, e.g. /etc/nats (default: --pki-dir)")
	storeDir := fs.String("store-dir", "/data", "JetStream's store directory as nats-server sees it")
	listen := fs.String("listen", "0.0.0.0:"+strconv.Itoa(natsserver.DefaultPort), "host:port nats-server listens on for clients")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: skiff nats-config [--pki-dir DIR] [--cert-dir DIR] [--store-dir DIR] [--listen HOST:PORT]")
		return 2
	}
	host, portText, err := net.SplitHostPort(*listen)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil || port < 1 || port > 65535 {
		fmt.Fprintf(os.Stderr, "skiff nats-config: --listen %q is not host:port\n", *listen)
		return 2
	}
	file, err := natsserver.ConfigFileFromPKI(*pkiDir, *certDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff nats-config: %v\n", err)
		return 1
	}
	file.Host, file.Port, file.StoreDir = host, port, *storeDir
	text, err := natsserver.RenderConfig(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skiff nats-config: %v\n", err)
		return 1
	}
	if _, err := out.Write(text); err != nil {
		return 1
	}
	return 0
}
