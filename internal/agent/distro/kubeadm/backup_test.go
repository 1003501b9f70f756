package kubeadm

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/etcdsnap/etcdsnaptest"
	distrokubeadm "kiln.dev/kiln/internal/distro/kubeadm"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/internal/pki"
)

const backupVersion = "v1.36.3"

// transferRecorder is a recorder that can move snapshots: what kiln-agent
// gives an executor.
type transferRecorder struct {
	recorder
	etcdsnaptest.Transfers
}

// kubeadmNode is a control-plane host as kubeadm leaves it, under a
// temporary root: the four static pods' manifests (etcd's client URL and
// the API server's address are those of the servers given, which answer
// as etcd's /health and the API server's /readyz), the certificates they
// are checked with, etcd's data and kiln-kube. Its kubelet is a double: a
// pod runs while its manifest is in ManifestsDir.
type kubeadmNode struct {
	e          *Executor
	root       string
	tool       *etcdsnaptest.Tool
	etcd, api  *httptest.Server
	etcdHealth string // what etcd's /health answers
}

func newKubeadmNode(t *testing.T, snapshot []byte) *kubeadmNode {
	t.Helper()
	root := t.TempDir()
	n := &kubeadmNode{root: root, tool: &etcdsnaptest.Tool{Snapshot: snapshot}, etcdHealth: `{"health":"true","reason":""}`}
	ca, err := pki.NewCA("kubernetes", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write := func(rel string, b []byte) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write(distrokubeadm.ClusterCACert, ca.CertPEM())
	write(etcdCACert, ca.CertPEM())
	for _, c := range []struct{ cert, key string }{{etcdClientCert, etcdClientKey}, {apiClientCert, apiClientKey}} {
		cert, key, err := ca.Issue(pki.CertRequest{CommonName: "client", Usage: pki.UsageClient})
		if err != nil {
			t.Fatal(err)
		}
		write(c.cert, cert)
		write(c.key, key)
	}
	serverCert, serverKey, err := ca.Issue(pki.CertRequest{CommonName: "server", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Usage: pki.UsageServer})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(h http.HandlerFunc) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		cert, err := tls.X509KeyPair(serverCert, serverKey)
		if err != nil {
			t.Fatal(err)
		}
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}
		s.StartTLS()
		t.Cleanup(s.Close)
		return s
	}
	n.etcd = serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" || len(r.TLS.PeerCertificates) == 0 || !n.podRuns(podEtcd) {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, n.etcdHealth)
	})
	n.api = serve(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !n.podRuns(podAPIServer) {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	api, _ := url.Parse(n.api.URL)
	manifests := map[string]string{
		podEtcd: "    - etcd\n    - --advertise-client-urls=" + n.etcd.URL + "\n    - --data-dir=/var/lib/etcd\n" +
			"    - --initial-advertise-peer-urls=https://10.0.0.2:2380\n    - --initial-cluster=cp-1=https://10.0.0.2:2380\n" +
			"    - --listen-client-urls=" + n.etcd.URL + "\n    - --name=cp-1\n",
		podAPIServer:         "    - kube-apiserver\n    - --advertise-address=" + api.Hostname() + "\n    - --secure-port=" + api.Port() + "\n",
		podControllerManager: "    - kube-controller-manager\n",
		podScheduler:         "    - kube-scheduler\n",
	}
	for pod, args := range manifests {
		write(ManifestsDir+"/"+pod+".yaml", []byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - command:\n"+args))
	}
	write("/var/lib/etcd/member/wal/0.wal", []byte("the data before"))
	write(distrokubeadm.KubeDir+"/"+backupVersion+"/kiln-kube", []byte("#!/bin/sh\n"))
	n.e = &Executor{Root: root, tool: n.tool.Run, procs: func(names []string) ([]string, error) {
		var up []string
		for _, name := range names {
			if n.podRuns(name) {
				up = append(up, name)
			}
		}
		return up, nil
	}}
	return n
}

func (n *kubeadmNode) podRuns(pod string) bool {
	_, err := os.Stat(filepath.Join(n.root, ManifestsDir, pod+".yaml"))
	return err == nil
}

func (n *kubeadmNode) instruction(t *testing.T, id, kind string, params any) v1.Instruction {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	return v1.Instruction{ID: id, Kind: kind, Params: raw}
}

// A snapshot of kubeadm's etcd is taken with kiln-kube of the cluster's
// version, through etcd's client URL with the API server's etcd client
// certificate, and uploaded; a host without etcd's static pod (a worker)
// is refused before anything runs.
func TestKubeadmEtcdSnapshot(t *testing.T) {
	snap := []byte("an etcd snapshot")
	n := newKubeadmNode(t, snap)
	rec := &transferRecorder{}
	err := n.e.Execute(t.Context(), n.instruction(t, "i-1", v1.InstructionEtcdSnapshot,
		v1.EtcdSnapshotParams{Backup: "b1", KubernetesVersion: backupVersion}), rec)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Uploads[v1.AgentSnapshotPath+"i-1"]; !bytes.Equal(got, snap) {
		t.Errorf("uploaded %q, want %q", got, snap)
	}
	args := n.tool.Last("etcd-snapshot save")
	want := []string{"--endpoints", n.etcd.URL, "--cacert", filepath.Join(n.root, etcdCACert),
		"--cert", filepath.Join(n.root, etcdClientCert), "--key", filepath.Join(n.root, etcdClientKey)}
	if len(args) < len(want) || !slices.Equal(args[len(args)-len(want):], want) {
		t.Errorf("kiln-kube %q, want it to end with %q", args, want)
	}
	var res v1.EtcdSnapshotResult
	if err := json.Unmarshal(rec.Data, &res); err != nil || res.SHA256 != etcdsnaptest.Digest(snap) {
		t.Errorf("result data %s (%v)", rec.Data, err)
	}
	if got := rec.states(); !slices.Equal(got, []string{"snapshot-etcd Running", "snapshot-etcd Succeeded", "upload-snapshot Running", "upload-snapshot Succeeded"}) {
		t.Errorf("progress %q", got)
	}

	t.Run("a worker", func(t *testing.T) {
		w := newKubeadmNode(t, snap)
		if err := os.RemoveAll(filepath.Join(w.root, ManifestsDir)); err != nil {
			t.Fatal(err)
		}
		err := w.e.Execute(t.Context(), w.instruction(t, "i-2", v1.InstructionEtcdSnapshot, v1.EtcdSnapshotParams{Backup: "b1", KubernetesVersion: backupVersion}), &transferRecorder{})
		var fe *failure.Error
		if !errors.As(err, &fe) || fe.Retryable || fe.Code != v1.CodeInvalidParameter || !strings.Contains(fe.Message, "no etcd static pod") {
			t.Errorf("error %v, want a terminal InvalidParameter naming the missing static pod", err)
		}
		if c := w.tool.Count("etcd-snapshot save"); c != 0 {
			t.Errorf("kiln-kube ran %d times", c)
		}
	})
}

// A restore's phases on a kubeadm control-plane node: the snapshot is
// staged, the static pods stop (their manifests leave the kubelet's
// directory, etcd last), etcd's data dir becomes the restored member and
// the old one is kept beside it, and the pods start again once etcd and
// the API server answer. A member the restored cluster does not name is
// refused and nothing changes.
func TestKubeadmEtcdRestorePhases(t *testing.T) {
	snap := []byte("an etcd snapshot")
	n := newKubeadmNode(t, nil)
	rec := &transferRecorder{Transfers: etcdsnaptest.Transfers{Downloads: map[string][]byte{v1.AgentSnapshotPath + "i-r": snap}}}
	params := func(phase, cluster string) v1.EtcdRestoreParams {
		return v1.EtcdRestoreParams{Backup: "b1", Phase: phase, Size: int64(len(snap)), SHA256: etcdsnaptest.Digest(snap),
			InitialCluster: cluster, Token: "restore-op1", KubernetesVersion: backupVersion}
	}
	run := func(phase, cluster string) error {
		return n.e.Execute(t.Context(), n.instruction(t, "i-r", v1.InstructionEtcdRestore, params(phase, cluster)), rec)
	}
	const members = "cp-1=https://10.0.0.2:2380,cp-2=https://10.0.0.3:2380"
	if err := run(v1.RestoreStage, ""); err != nil {
		t.Fatal(err)
	}
	if !n.podRuns(podEtcd) || !n.podRuns(podAPIServer) {
		t.Fatal("staging stopped a pod")
	}
	if err := run(v1.RestoreStop, ""); err != nil {
		t.Fatal(err)
	}
	for _, pod := range stopOrder {
		if n.podRuns(pod) {
			t.Errorf("%s runs after the stop phase", pod)
		}
	}

	// Named otherwise in the restored cluster: refused, the data stays.
	err := run(v1.RestoreEtcd, "cp-1=https://10.9.9.9:2380")
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != v1.CodeConflict || !strings.Contains(fe.Message, "cp-1 at https://10.0.0.2:2380") {
		t.Errorf("restore as another member: %v, want a Conflict naming this member", err)
	}
	if c := n.tool.Count("etcd-snapshot restore"); c != 0 {
		t.Errorf("kiln-kube etcd-snapshot restore ran %d times", c)
	}

	if err := run(v1.RestoreEtcd, members); err != nil {
		t.Fatal(err)
	}
	wal, err := os.ReadFile(filepath.Join(n.root, "var/lib/etcd/member/wal/0.wal"))
	if err != nil || !bytes.Equal(wal, snap) {
		t.Errorf("etcd's data after the restore: %q, %v; want the snapshot's", wal, err)
	}
	before, err := os.ReadFile(filepath.Join(n.root, "var/lib/etcd.before-b1/member/wal/0.wal"))
	if err != nil || string(before) != "the data before" {
		t.Errorf("the data dir moved aside: %q, %v", before, err)
	}
	args := n.tool.Last("etcd-snapshot restore")
	for _, want := range [][2]string{{"--name", "cp-1"}, {"--initial-advertise-peer-urls", "https://10.0.0.2:2380"}, {"--initial-cluster", members}} {
		if i := slices.Index(args, want[0]); i < 0 || args[i+1] != want[1] {
			t.Errorf("kiln-kube %q: want %s %s", args, want[0], want[1])
		}
	}
	if !n.podRuns(podEtcd) || n.podRuns(podAPIServer) {
		t.Error("after the restore phase etcd should run, the API server not yet")
	}
	// Again (the controller asks again after a restart): nothing restored twice.
	if err := run(v1.RestoreEtcd, members); err != nil {
		t.Fatal(err)
	}
	if c := n.tool.Count("etcd-snapshot restore"); c != 1 {
		t.Errorf("kiln-kube etcd-snapshot restore ran %d times, want 1", c)
	}

	if err := run(v1.RestoreStart, ""); err != nil {
		t.Fatal(err)
	}
	for _, pod := range stopOrder {
		if !n.podRuns(pod) {
			t.Errorf("%s does not run after the start phase", pod)
		}
	}
	if _, err := os.Stat(n.e.snap().StagedPath("b1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the staged snapshot is still there: %v", err)
	}
	for _, step := range []string{StepEtcdHealthy, StepAPIServerReady} {
		if m := rec.message(step, v1.StepSucceeded); !strings.HasPrefix(m, "answered after") {
			t.Errorf("step %s: %q", step, m)
		}
	}
}

// An etcd that does not say it is healthy fails the start phase, once the
// wait is over, with what it said; the phase is retryable and the API
// server is not started.
func TestKubeadmRestoreStartNamesUnhealthyEtcd(t *testing.T) {
	n := newKubeadmNode(t, nil)
	n.e.wait = 2 * time.Second
	n.etcdHealth = `{"health":"false","reason":"NOSPACE"}`
	if err := n.e.stopPods(t.Context(), stopOrder...); err != nil {
		t.Fatal(err)
	}
	err := n.e.Execute(t.Context(), n.instruction(t, "i-s", v1.InstructionEtcdRestore,
		v1.EtcdRestoreParams{Backup: "b1", Phase: v1.RestoreStart, KubernetesVersion: backupVersion}), &transferRecorder{})
	var fe *failure.Error
	if !errors.As(err, &fe) || !fe.Retryable || fe.Code != v1.CodeTimeout || !strings.Contains(fe.Message, "NOSPACE") || !strings.Contains(fe.Message, "etcd did not answer") {
		t.Errorf("start with an unhealthy etcd: %v, want a retryable Timeout with what etcd said", err)
	}
	if n.podRuns(podAPIServer) {
		t.Error("the API server was started before etcd was healthy")
	}
}
