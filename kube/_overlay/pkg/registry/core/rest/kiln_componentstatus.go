// This file is added to k8s.io/kubernetes/pkg/registry/core/rest when Kiln builds kiln-kube
// (scripts/kube-build.sh, go build -overlay; docs/kube.md, "The componentstatus patch").
//
// Upstream's kube-apiserver probes the controller-manager and the scheduler for
// `kubectl get componentstatuses` at 127.0.0.1 on their default ports. A node of Kiln's local
// distribution runs them on its own loopback address (127.0.0.N), so upstream would report
// them Unhealthy while they run. The two variables below name where this apiserver's own
// node runs them; unset, upstream's addresses stay.

package rest

import (
	"net"
	"os"
	"strconv"
)

const (
	kilnControllerManagerEnv = "KILN_COMPONENTSTATUS_CONTROLLER_MANAGER" // HOST:PORT
	kilnSchedulerEnv         = "KILN_COMPONENTSTATUS_SCHEDULER"          // HOST:PORT
)

// kilnComponentHost is the host of the HOST:PORT in the environment variable env, or def.
func kilnComponentHost(env, def string) string {
	if host, _, ok := kilnComponent(env); ok {
		return host
	}
	return def
}

// kilnComponentPort is the port of the HOST:PORT in the environment variable env, or def.
func kilnComponentPort(env string, def int) int {
	if _, port, ok := kilnComponent(env); ok {
		return port
	}
	return def
}

func kilnComponent(env string) (string, int, bool) {
	host, p, err := net.SplitHostPort(os.Getenv(env))
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, false
	}
	return host, port, true
}
