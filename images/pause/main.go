// Command pause is the sandbox ("pause") container of every pod on Kiln's real nodes: it holds
// the pod's namespaces and does nothing else. Kiln builds it from this source (no image is
// pulled): a static binary that sleeps until SIGINT or SIGTERM and reaps the zombies it
// inherits when a pod shares its process namespace, as upstream's pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
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
