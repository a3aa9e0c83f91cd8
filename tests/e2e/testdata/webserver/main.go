// Command webserver is the server a pod runs in the port-forward test: it
// answers every request on 127.0.0.1:PORT with "hello from the pod". It is a
// Go program so the test needs nothing beyond Go on the machine.
package main

import (
	"fmt"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: webserver PORT")
		os.Exit(2)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello from the pod")
	})
	fmt.Println("listening on 127.0.0.1:" + os.Args[1])
	if err := http.ListenAndServe("127.0.0.1:"+os.Args[1], nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
