// Command pause is the sandbox (pause) process of the lab's real node. The node reaches
// no registry, so its sandbox image is built here from this static binary and imported
// into containerd by hand (see node-up.sh). Like the upstream pause it sleeps until
// SIGINT or SIGTERM and, as PID 1 of the pod's PID namespace when it is shared, reaps
// zombies.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
