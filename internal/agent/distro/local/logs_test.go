package local

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// lineSink keeps the lines forwarded to it.
type lineSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *lineSink) Log(stream, line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, stream+": "+line)
}

func (s *lineSink) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// TestRoutineLinesNotForwarded: what components write in numbers on every
// healthy node (these lines are from a fresh local node) is left out of the
// node's log, once summarized with where the whole log is; the rest is
// forwarded as written.
func TestRoutineLinesNotForwarded(t *testing.T) {
	routineLines := map[string][]string{
		APIServer: {
			`W1125 05:10:43.648370   31736 logging.go:55] [core] [Channel #1 SubChannel #3]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.2:2379", ServerName: "127.0.0.2:2379", BalancerAttributes: {"<%!p(pickfirstleaf.managedByPickfirstKeyType={})>": "<%!p(bool=true)>" }}. Err: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.2:2379: operation was canceled"`,
			`W1125 05:40:12.387866    9206 logging.go:55] [core] [Channel #13 SubChannel #14]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.2:2379", ServerName: "127.0.0.2:2379", BalancerAttributes: {"<%!p(pickfirstleaf.managedByPickfirstKeyType={})>": "<%!p(bool=true)>" }}. Err: connection error: desc = "transport: authentication handshake failed: context canceled"`,
			`I1125 05:10:44.211472   31736 handler.go:304] Adding GroupVersion authentication.k8s.io v1 to ResourceManager`,
			`W1125 05:10:44.211504   31736 genericapiserver.go:787] Skipping API authentication.k8s.io/v1beta1 because it has no resources.`,
			`I1125 05:10:43.860102   31736 apis.go:112] API group "internal.apiserver.k8s.io" is not enabled, skipping.`,
			`I1125 05:10:44.976042   31736 cache.go:32] Waiting for caches to sync for APIServiceRegistrationController controller`,
		},
		Etcd: {
			`{"level":"warn","ts":"2026-11-25T05:10:43.650709Z","caller":"embed/config_logging.go:188","msg":"rejected connection on client endpoint","remote-addr":"127.0.0.1:47618","server-name":"","error":"EOF"}`,
		},
		ControllerManager: {
			`I1125 05:10:46.100000   31766 shared_informer.go:370] "Waiting for caches to sync" controller="endpoint"`,
			`I1125 05:10:46.200000   31766 shared_informer.go:377] "Caches are synced" controller="endpoint"`,
			`I1125 05:40:17.100000    9218 resource_quota_monitor.go:228] "QuotaMonitor created object count evaluator" logger="resourcequota-controller" resource="replicasets.apps"`,
			`I1125 15:12:21.507236    1134 controller_descriptor.go:99] "Controller is disabled by a feature gate" controller="storageversion-garbage-collector-controller" requiredFeatureGates=["APIServerIdentity","StorageVersionAPI"]`,
			`I1125 15:12:21.507267    1134 controllermanager.go:641] "Warning: skipping controller" controller="storageversion-garbage-collector-controller"`,
			`I1125 15:12:22.054768    1134 controllermanager.go:689] "Warning: controller is disabled" controller="bootstrap-signer-controller"`,
		},
		Kubelet: {
			`E1125 05:10:58.570354   31826 eviction_manager.go:264] "Eviction manager: failed to get HasDedicatedImageFs" err="imagefs device is not found"`,
			`E1125 05:10:48.553618   31826 kubelet.go:1656] "Image garbage collection failed once. Stats initialization may not have completed yet" err="imageFs information is unavailable"`,
		},
	}
	summaries := map[string]string{
		APIServer:         "[kiln-agent: routine lines not forwarded: 2 gRPC dials the component canceled, 3 API groups set up, 1 informer cache syncs; every line is in ",
		Etcd:              "[kiln-agent: routine lines not forwarded: 1 connections closed before their TLS handshake; every line is in ",
		ControllerManager: "[kiln-agent: routine lines not forwarded: 2 informer cache syncs, 1 quota evaluators created, 3 controllers off by default; every line is in ",
		Kubelet:           "[kiln-agent: routine lines not forwarded: 2 reports of the hollow kubelet's missing image filesystem; every line is in ",
	}
	kept := map[string][]string{
		APIServer: {
			`I1125 05:10:44.975179   31736 secure_serving.go:211] Serving securely on 127.0.0.2:6443`,
			`W1125 05:10:50.000000   31736 logging.go:55] [core] [Channel #3 SubChannel #4]grpc: addrConn.createTransport failed to connect to {Addr: "127.0.0.2:2379"}. Err: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.2:2379: connect: connection refused"`,
		},
		Etcd: {
			`{"level":"warn","ts":"2026-11-25T05:10:43.650709Z","caller":"embed/config_logging.go:188","msg":"rejected connection on client endpoint","remote-addr":"127.0.0.1:47618","server-name":"","error":"tls: bad certificate"}`,
		},
		ControllerManager: {`I1125 05:10:46.300000   31766 leaderelection.go:271] "Successfully acquired lease" lock="kube-system/kube-controller-manager"`},
		Kubelet:           {`I1125 05:10:48.682219   31826 kubelet_node_status.go:77] "Successfully registered node" node="n1"`},
	}
	f := newLogForwarder()
	t.Cleanup(f.close)
	sink := &lineSink{}
	f.setSink(sink)
	dir := t.TempDir()
	var want []string
	for _, c := range []string{APIServer, Etcd, ControllerManager, Kubelet} {
		path := filepath.Join(dir, c+".log")
		// Routine lines first, the others among and after them.
		all := append(slices.Clone(routineLines[c]), kept[c]...)
		if err := os.WriteFile(path, []byte(strings.Join(all, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		f.followFrom(c, path, 0)
		for _, l := range kept[c] {
			want = append(want, c+": "+l)
		}
		want = append(want, c+": "+summaries[c]+path+"]")
	}
	f.poll()
	got := sink.all()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("forwarded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// More routine lines within the minute are counted, not summarized again.
	file, err := os.OpenFile(filepath.Join(dir, Kubelet+".log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(file, routineLines[Kubelet][0])
	file.Close()
	f.poll()
	if n := len(sink.all()); n != len(want) {
		t.Errorf("%d lines forwarded after another routine line, want %d", n, len(want))
	}
}
