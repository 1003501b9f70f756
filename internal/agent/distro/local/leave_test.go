package local

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/atomicfile"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
)

// gateway is etcd's gRPC gateway as a staying member answers it, over
// TLS with client certificates of the cluster CA; refuse answers removals
// as etcd's strict reconfiguration check does when quorum would be lost.
type gateway struct {
	mu      sync.Mutex
	members map[uint64]string
	refuse  bool
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "no client certificate", http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/v3/cluster/member/list":
		var ms []map[string]any
		for id, n := range g.members {
			ms = append(ms, map[string]any{"ID": strconv.FormatUint(id, 10), "name": n})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"members": ms})
	case "/v3/cluster/member/remove":
		var req struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		id, _ := strconv.ParseUint(req.ID, 10, 64)
		switch {
		case g.refuse:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 14, "message": "etcdserver: unhealthy cluster"})
		case g.members[id] == "":
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"code": 5, "message": "etcdserver: member not found"})
		default:
			delete(g.members, id)
			_, _ = w.Write([]byte(`{}`))
		}
	default:
		http.NotFound(w, r)
	}
}

func (g *gateway) has(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.members {
		if n == name {
			return true
		}
	}
	return false
}

// leaveNode is a control-plane node's root as an install left it (the CA,
// the API server's etcd client certificate, the recorded components and
// etcd's data dir; nothing runs), and a staying member's gateway.
func leaveNode(t *testing.T, g *gateway) (*Executor, string) {
	t.Helper()
	root := t.TempDir()
	ca, err := pki.NewCA("kiln-test", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, b []byte) {
		if err := atomicfile.WriteMkdirAll(filepath.Join(root, filepath.FromSlash(rel)), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(distrolocal.FileCA, ca.CertPEM())
	cert, key, err := ca.Issue(pki.CertRequest{CommonName: "kube-apiserver-etcd-client", Usage: pki.UsageClient})
	if err != nil {
		t.Fatal(err)
	}
	write(distrolocal.FileAPIServerEtcdCert, cert)
	write(distrolocal.FileAPIServerEtcdKey, key)
	dataDir := filepath.Join(root, dirEtcd)
	write(dirEtcd+"/member/wal/0.wal", []byte("wal"))
	all := []spec{
		{name: Etcd, binary: "/nonexistent/kiln-kube", args: []string{"--name", "c-cp-2", "--data-dir", dataDir}, hash: "e"},
		{name: Kubelet, binary: "/nonexistent/kiln-kube", args: []string{"--v", "1"}, hash: "k"},
	}
	if err := saveSpecs(filepath.Join(root, specsFile), all); err != nil {
		t.Fatal(err)
	}

	srvCert, srvKey, err := ca.Issue(pki.CertRequest{CommonName: "c-cp-0", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	srv := httptest.NewUnstartedServer(g)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &Executor{Root: root, KubeBinary: "/nonexistent/kiln-kube", Logger: testLogger(t)}, srv.URL
}

func leaveInstruction(t *testing.T, through ...string) v1.Instruction {
	raw, err := json.Marshal(v1.EtcdLeaveParams{Member: "c-cp-2", Through: through})
	if err != nil {
		t.Fatal(err)
	}
	return v1.Instruction{ID: "op.shrink-control-plane.c-cp-2.1", Kind: v1.InstructionEtcdLeave, Params: raw}
}

// TestLeave: the node's member is removed through the member that stays
// (with the node's etcd client certificate), etcd's data dir goes, and the
// recorded components keep the kubelet only, so a restarted agent starts
// no control plane. Run again, the leave finds the member gone and is done.
func TestLeave(t *testing.T) {
	g := &gateway{members: map[uint64]string{1: "c-cp-0", 2: "c-cp-1", 3: "c-cp-2"}}
	e, url := leaveNode(t, g)
	down := "https://127.0.0.1:1" // a member that stays but does not answer: the next is asked
	in := leaveInstruction(t, down, url)

	rec := &recorder{}
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("leave: %v", err)
	}
	steps, states := rec.final()
	if diff := cmp.Diff([]string{StepStopAPIServer, StepRemoveEtcdMember, StepStopEtcd}, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	for _, s := range steps {
		if states[s].State != v1.StepSucceeded {
			t.Errorf("step %s %s: %s", s, states[s].State, states[s].Message)
		}
	}
	if g.has("c-cp-2") {
		t.Error("member c-cp-2 is still in the cluster")
	}
	if _, err := os.Stat(filepath.Join(e.Root, dirEtcd)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("etcd's data dir is still there: %v", err)
	}
	left, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].name != Kubelet {
		t.Errorf("recorded components %+v, want the kubelet only", left)
	}

	rec = &recorder{}
	if err := e.Execute(t.Context(), in, rec); err != nil {
		t.Fatalf("leave again: %v", err)
	}
	_, states = rec.final()
	if got := states[StepRemoveEtcdMember].Message; got != "member c-cp-2 was not in the cluster: removed before" {
		t.Errorf("leave again: %s says %q", StepRemoveEtcdMember, got)
	}
}

// A removal etcd refuses (the others would lose quorum) is retryable and
// leaves the member and its data.
func TestLeaveRefused(t *testing.T) {
	g := &gateway{members: map[uint64]string{1: "c-cp-0", 3: "c-cp-2"}, refuse: true}
	e, url := leaveNode(t, g)
	rec := &recorder{}
	err := e.Execute(t.Context(), leaveInstruction(t, url), rec)
	var fe *failure.Error
	if !errors.As(err, &fe) || !fe.Retryable || fe.Code != v1.CodeUnavailable {
		t.Fatalf("leave = %v, want a retryable Unavailable failure", err)
	}
	if !g.has("c-cp-2") {
		t.Error("member c-cp-2 was removed")
	}
	if _, err := os.Stat(filepath.Join(e.Root, dirEtcd)); err != nil {
		t.Errorf("etcd's data dir: %v, want it kept", err)
	}
	_, states := rec.final()
	if states[StepRemoveEtcdMember].State != v1.StepFailed {
		t.Errorf("%s %+v, want Failed", StepRemoveEtcdMember, states[StepRemoveEtcdMember])
	}
}

// Sent to a node that stays for another node's member (its machine is
// gone), a leave removes that member and stops nothing here.
func TestLeaveDepartedMember(t *testing.T) {
	g := &gateway{members: map[uint64]string{1: "c-cp-0", 2: "c-cp-1", 3: "c-cp-2"}}
	e, url := leaveNode(t, g) // this node's member is c-cp-2
	raw, _ := json.Marshal(v1.EtcdLeaveParams{Member: "c-cp-1", Through: []string{url}})
	rec := &recorder{}
	if err := e.Execute(t.Context(), v1.Instruction{ID: "x", Kind: v1.InstructionEtcdLeave, Params: raw}, rec); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if g.has("c-cp-1") || !g.has("c-cp-2") {
		t.Errorf("members %v, want c-cp-1 removed and this node's kept", g.members)
	}
	steps, _ := rec.final()
	if diff := cmp.Diff([]string{StepRemoveEtcdMember}, steps); diff != "" {
		t.Errorf("steps (-want +got):\n%s", diff)
	}
	left, err := loadSpecs(filepath.Join(e.Root, specsFile))
	if err != nil || len(left) != 2 {
		t.Errorf("recorded components %+v, %v: want them as they were", left, err)
	}
	if _, err := os.Stat(filepath.Join(e.Root, dirEtcd)); err != nil {
		t.Errorf("etcd's data dir: %v, want it kept", err)
	}
}

// Params without a member or without members that stay are terminal.
func TestLeaveBadParams(t *testing.T) {
	e, _ := leaveNode(t, &gateway{})
	raw, _ := json.Marshal(v1.EtcdLeaveParams{Member: "c-cp-2"})
	err := e.Execute(t.Context(), v1.Instruction{ID: "x", Kind: v1.InstructionEtcdLeave, Params: raw}, &recorder{})
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Retryable || fe.Code != v1.CodeInvalidParameter {
		t.Fatalf("leave = %v, want a terminal InvalidParameter", err)
	}
}
