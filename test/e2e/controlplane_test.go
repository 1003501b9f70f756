package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/etcdmember"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/test/waitfor"
)

// TestControlPlaneGrows: a one-node control plane grows to 3 and then to 5
// through PATCH, each new member joining etcd; kubectl sees every
// control-plane node Ready. The proof that the five are voting etcd members:
// with two of them killed, the API still takes writes (3 of 5 is a quorum;
// it would not be with fewer members).
func TestControlPlaneGrows(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("grow", 1, false, 0))

	for _, size := range []int{3, 5} {
		began := time.Now()
		_, opID, err := e.c.PatchCluster(t.Context(), "default", "grow",
			map[string]any{"spec": map[string]any{"controlPlane": map[string]any{"size": size}}})
		if err != nil {
			t.Fatalf("grow to %d: %v", size, err)
		}
		op := e.wait("grow", opID)
		t.Logf("grow to %d: Succeeded in %s", size, time.Since(began).Round(time.Millisecond))
		for _, s := range op.Properties.Steps {
			t.Logf("  %-30s %-9s attempts %d  %s", s.Name, s.State, s.Attempts, stepDuration(s))
		}
		nodes := e.kubeNodes("grow")
		for i := range size {
			name := fmt.Sprintf("grow-cp-%d", i)
			n, ok := nodes[name]
			if !ok || !n.ready() {
				t.Fatalf("after growing to %d: node %s present %v, Ready %v", size, name, ok, n.ready())
			}
			if _, ok := n.Metadata.Labels["node-role.kubernetes.io/control-plane"]; !ok {
				t.Errorf("node %s labels %v", name, n.Metadata.Labels)
			}
		}
		if len(nodes) != size {
			t.Errorf("after growing to %d: %d nodes in Kubernetes", size, len(nodes))
		}
	}

	// One controller-manager and one scheduler act at a time: every node's,
	// the first one's too, takes part in leader election.
	for _, p := range processesUnder(filepath.Join(e.data, "machines", "default", "grow")) {
		if strings.Contains(p, "--leader-elect=false") {
			t.Errorf("a control-plane component runs without leader election: %s", p)
		}
	}

	for _, name := range []string{"grow-cp-0", "grow-cp-1"} {
		dead := filepath.Join(e.data, "machines", "default", "grow", name)
		killProcessesUnder(t, dead)
		waitfor.Cond(t, name+"'s processes to be gone", 30*time.Second, func() (bool, error) {
			return len(processesUnder(dead)) == 0, nil
		})
	}
	waitfor.Cond(t, "the API to take a write with two of five members gone", 90*time.Second, func() (bool, error) {
		_, err := e.kubectl("grow", "create", "configmap", "quorum", "--from-literal=ok=yes")
		return err == nil, nil
	})
	if got := e.mustKubectl("grow", "get", "configmap", "quorum", "-o", "jsonpath={.data.ok}"); got != "yes" {
		t.Errorf("configmap written with two members gone reads %q", got)
	}
}

// TestControlPlaneShrinks: a control plane grown to 5 shrinks to 3 and
// then to 1 through PATCH, the highest-numbered nodes leaving one at a
// time. After each shrink the API takes a write, kubectl sees exactly the
// control-plane nodes that stay, all Ready, etcd's member list (asked
// through the first node's member, with its API server's etcd client
// certificate) has exactly their members, and the removed machines run
// nothing.
func TestControlPlaneShrinks(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("shrink", 1, false, 0))
	resize := func(size int) *v1.Operation {
		t.Helper()
		began := time.Now()
		_, opID, err := e.c.PatchCluster(t.Context(), "default", "shrink",
			map[string]any{"spec": map[string]any{"controlPlane": map[string]any{"size": size}}})
		if err != nil {
			t.Fatalf("control plane to %d: %v", size, err)
		}
		op := e.wait("shrink", opID)
		t.Logf("control plane to %d: Succeeded in %s", size, time.Since(began).Round(time.Millisecond))
		for _, s := range op.Properties.Steps {
			t.Logf("  %-30s %-9s attempts %d  %s  %s", s.Name, s.State, s.Attempts, stepDuration(s), s.Message)
		}
		return op
	}
	resize(5)
	if got, want := e.etcdMembers("shrink"), cpNames("shrink", 5); !slices.Equal(got, want) {
		t.Fatalf("etcd members after growing to 5: %v, want %v", got, want)
	}

	for _, tt := range []struct {
		size    int
		removed []string
	}{{3, []string{"shrink-cp-4", "shrink-cp-3"}}, {1, []string{"shrink-cp-2", "shrink-cp-1"}}} {
		op := resize(tt.size)
		var msg string
		for _, s := range op.Properties.Steps {
			if s.Name == "shrink-control-plane" {
				if s.State != v1.StepSucceeded {
					t.Errorf("shrink to %d: shrink-control-plane %s", tt.size, s.State)
				}
				msg = s.Message
			}
		}
		if !strings.HasSuffix(msg, ": "+strings.Join(tt.removed, ", ")) {
			t.Errorf("shrink to %d: shrink-control-plane says %q, want the nodes removed in order, %v", tt.size, msg, tt.removed)
		}

		want := cpNames("shrink", tt.size)
		cm := fmt.Sprintf("after-%d", tt.size)
		waitfor.Cond(t, fmt.Sprintf("the API to take a write with %d members", tt.size), 60*time.Second, func() (bool, error) {
			_, err := e.kubectl("shrink", "create", "configmap", cm, "--from-literal=ok=yes")
			return err == nil, nil
		})
		if got := e.mustKubectl("shrink", "get", "configmap", cm, "-o", "jsonpath={.data.ok}"); got != "yes" {
			t.Errorf("configmap written after shrinking to %d reads %q", tt.size, got)
		}
		nodes := e.kubeNodes("shrink")
		var names []string
		for name, n := range nodes {
			names = append(names, name)
			if !n.ready() {
				t.Errorf("after shrinking to %d: node %s is not Ready", tt.size, name)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("after shrinking to %d: Kubernetes has nodes %v, want %v", tt.size, names, want)
		}
		if got := e.etcdMembers("shrink"); !slices.Equal(got, want) {
			t.Errorf("after shrinking to %d: etcd members %v, want %v", tt.size, got, want)
		}
		for _, name := range tt.removed {
			if left := processesUnder(filepath.Join(e.data, "machines", "default", "shrink", name)); len(left) > 0 {
				t.Errorf("removed machine %s still runs %v", name, left)
			}
			if _, err := e.c.GetNode(t.Context(), "default", "shrink", name); err == nil {
				t.Errorf("removed node %s still has a record", name)
			}
		}
	}

	// The configmaps written while the control plane had 5 and 3 members
	// are still there with one.
	if got := e.mustKubectl("shrink", "get", "configmap", "after-3", "-o", "jsonpath={.data.ok}"); got != "yes" {
		t.Errorf("configmap written with 3 members reads %q with 1", got)
	}
}

// cpNames are the names of a cluster's first n control-plane nodes, sorted.
func cpNames(cluster string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-cp-%d", cluster, i))
	}
	return out
}

// etcdMembers are the names of the etcd members of a local cluster, sorted,
// as its first control-plane node's member lists them (etcd's JSON gateway,
// with the node's API server's etcd client certificate).
func (e *env) etcdMembers(cluster string) []string {
	e.t.Helper()
	first := cluster + "-cp-0"
	n, err := e.c.GetNode(e.t.Context(), "default", cluster, first)
	if err != nil {
		e.t.Fatal(err)
	}
	root := filepath.Join(e.data, "machines", "default", cluster, first, "root")
	read := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			e.t.Fatal(err)
		}
		return b
	}
	pair, err := tls.X509KeyPair(read(distrolocal.FileAPIServerEtcdCert), read(distrolocal.FileAPIServerEtcdKey))
	if err != nil {
		e.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(read(distrolocal.FileCA))
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	ms, err := etcdmember.Client{HTTP: hc, Endpoints: []string{distrolocal.EtcdClientURL(n.Address)}}.Members(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}
