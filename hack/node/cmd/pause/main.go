// pause: the sandbox image's only process. It holds the pod's namespaces until the runtime
// stops it, reaps children it inherits as PID 1, and exits at once on SIGTERM or SIGINT (the
// upstream pause container does the same, in C). Built here because no image can be pulled
// from the internet; hack/node/build.sh compiles it static and the cluster packs it as an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
