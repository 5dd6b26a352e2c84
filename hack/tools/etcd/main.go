// Command etcd builds the etcd server from the Go module proxy for local control planes and envtest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
