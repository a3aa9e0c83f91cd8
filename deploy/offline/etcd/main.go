// Command etcd is etcd's own server main (go.etcd.io/etcd/server/v3/etcdmain), built
// from the Go module proxy for skiff's offline image quay.io/coreos/etcd. etcd's
// `go install` refuses its module's replace directives; this wrapper module pins the
// same versions without them.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
