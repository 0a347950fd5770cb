// etcd at the version k8s.io/kubernetes itself pins (its integration tests run it).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
