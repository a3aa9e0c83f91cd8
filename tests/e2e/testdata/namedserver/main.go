// Command namedserver is a Service backend in the proxy test: it answers every HTTP
// request on all addresses, port PORT, with NAME, so the test can tell which backend a
// connection to the Service reached.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: namedserver PORT NAME")
		os.Exit(2)
	}
	name := os.Args[2]
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		fmt.Fprint(w, name)
	})
	fmt.Println("listening on :" + os.Args[1])
	if err := http.ListenAndServe(":"+os.Args[1], nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
