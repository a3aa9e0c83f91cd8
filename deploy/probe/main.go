// Command probe is the healthcheck of skiff's images: `probe URL` GETs URL and exits 0
// when the answer is 2xx, 1 otherwise (with the reason on stderr), within 2 seconds.
// Like the kubelet's httpGet probe it does not verify an https server's certificate: it
// asks whether the server in its own container answers, not who it is. It exists
// because busybox's wget cannot complete a TLS handshake with Go's TLS 1.2/1.3 servers
// (it sends no signature_algorithms extension).
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe URL")
		os.Exit(2)
	}
	if err := probe(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		os.Exit(1)
	}
}

func probe(url string) error {
	client := &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		},
	}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
