package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// runUpstreamEtcd is the upstream etcd binary's main (server/main.go calls etcdmain.Main), of
// the etcd this kiln-kube links: every etcd flag, the ETCD_* variables, --config-file, the
// deprecated --experimental-* flags and --feature-gates, as kubeadm's local etcd static pod and
// its extraArgs pass them. It is what a link named etcd runs; `kiln-kube etcd` is Kiln's own
// command over the same server (embed), with --join, used by the local distribution and the
// node image. etcdmain.Main exits the process itself.
func runUpstreamEtcd() int {
	etcdmain.Main(os.Args)
	return 0
}
