// Command pause is the process of a pod sandbox on the local cluster's real nodes: it holds the pod's
// namespaces and does nothing until it is told to stop. As PID 1 of the sandbox it also reaps the
// zombies of processes that join the pod's PID namespace. Kubernetes' own pause image lives on
// registry.k8s.io, which is out of reach here, so the cluster builds this one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
