// Command coredns is the cluster DNS of Kiln's real clusters: CoreDNS
// (github.com/coredns/coredns), built by Kiln from its Go module with only
// the plugins a cluster's DNS needs, and packed as the image
// kiln.dev/coredns:VERSION by scripts/system-images.sh (docs/system-images.md).
//
// This is CoreDNS's own main (coredns.go) with its plugin list cut down:
// upstream's core/plugin/zplugin.go imports every plugin and its
// core/dnsserver/zdirectives.go orders them; here both are the handful
// below, in upstream's order. The kubeadm Corefile (errors, health, ready,
// kubernetes, prometheus, forward, cache, loop, reload, loadbalance) runs
// as it is; log and hosts are there for debugging and tests.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, each registering itself with CoreDNS when linked. The
	// metrics package is the prometheus directive.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives are the plugins a Corefile may use, in the order a query
// passes through them: upstream's order (its plugin.cfg), restricted to the
// plugins linked above. A plugin feels the effects of those after it.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"hosts",
	"kubernetes",
	"loop",
	"forward",
}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
