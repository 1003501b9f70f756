package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent"
	"kiln.dev/kiln/internal/agent/etcdsnap/etcdsnaptest"
	"kiln.dev/kiln/internal/atomicfile"
	distrolocal "kiln.dev/kiln/internal/distro/local"
	"kiln.dev/kiln/internal/failure"
	"kiln.dev/kiln/test/waitfor"
)

// transferRecorder is a recorder that can also upload, download and take
// result data: what an executor gets from kiln-agent.
type transferRecorder struct {
	recorder
	etcdsnaptest.Transfers
}

func digest(b []byte) string { return etcdsnaptest.Digest(b) }

// fakeNode is an Executor on a root where a control-plane install (cp is
// false: a worker's) is recorded, whose components are a program that
// sleeps, and whose kiln-kube is tool.
func fakeNode(t *testing.T, cp bool, tool *etcdsnaptest.Tool) *Executor {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "kiln-kube")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(root, dirEtcd)
	var all []spec
	if cp {
		all = append(all,
			spec{name: Etcd, dirs: []string{dataDir}, args: []string{"--name", "cp-0", "--data-dir", dataDir,
				"--advertise-client-urls", "https://127.0.0.1:2379", "--initial-advertise-peer-urls", "https://127.0.0.1:2380",
				"--join", "https://127.0.0.2:2379"}},
			spec{name: APIServer, args: []string{"--advertise-address", "127.0.0.1"}},
			spec{name: ControllerManager}, spec{name: Scheduler})
	}
	all = append(all, spec{name: Kubelet})
	for i := range all {
		all[i].binary = bin
		all[i].hash = specHash(all[i], nil)
	}
	if err := saveSpecs(filepath.Join(root, specsFile), all); err != nil {
		t.Fatal(err)
	}
	e := &Executor{KubeBinary: bin, Root: root, Logger: testLogger(t), StopTimeout: 5 * time.Second, tool: tool.Run}
	e.init()
	t.Cleanup(func() {
		e.Stop()
		e.Close()
	})
	return e
}

func instruction(t *testing.T, id, kind string, params any) v1.Instruction {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	return v1.Instruction{ID: id, Kind: kind, Params: raw}
}

// wantFailure checks that err is a *failure.Error of code, retryable or
// not, whose message has want.
func wantFailure(t *testing.T, err error, code string, retryable bool, want string) {
	t.Helper()
	var fe *failure.Error
	if !errors.As(err, &fe) || fe.Code != code || errors.Is(err, agent.ErrRetryable) != retryable || !strings.Contains(fe.Message, want) {
		t.Errorf("error %v, want %s (retryable %v) saying %q", err, code, retryable, want)
	}
}

func TestEtcdSnapshot(t *testing.T) {
	snap := []byte("an etcd snapshot")
	t.Run("uploads and hands back its status", func(t *testing.T) {
		tool := &etcdsnaptest.Tool{Snapshot: snap}
		e := fakeNode(t, true, tool)
		rec := &transferRecorder{}
		in := instruction(t, "i-1", v1.InstructionEtcdSnapshot, v1.EtcdSnapshotParams{Backup: "b1"})
		if err := e.Execute(t.Context(), in, rec); err != nil {
			t.Fatalf("etcd-snapshot: %v", err)
		}
		if got := rec.Uploads[v1.AgentSnapshotPath+"i-1"]; !bytes.Equal(got, snap) {
			t.Errorf("uploaded %q, want the snapshot", got)
		}
		var res v1.EtcdSnapshotResult
		if err := json.Unmarshal(rec.Data, &res); err != nil || res.Size != int64(len(snap)) || res.SHA256 != digest(snap) || res.Etcd.Revision != 42 {
			t.Errorf("result data %s (%v)", rec.Data, err)
		}
		steps, states := rec.final()
		if want := []string{StepSnapshotEtcd, StepUploadSnapshot}; !slices.Equal(steps, want) {
			t.Errorf("steps %v, want %v", steps, want)
		}
		for _, s := range steps {
			if states[s].State != v1.StepSucceeded {
				t.Errorf("step %s: %+v", s, states[s])
			}
		}
		if left, _ := filepath.Glob(filepath.Join(e.Root, dirBackup, "*")); len(left) != 0 {
			t.Errorf("files left: %v", left)
		}
	})

	t.Run("an upload refused fails, and leaves no file", func(t *testing.T) {
		e := fakeNode(t, true, &etcdsnaptest.Tool{Snapshot: snap})
		rec := &transferRecorder{Transfers: etcdsnaptest.Transfers{UploadErr: failure.Terminal(v1.CodeConflict, "backup b1 is Failed")}}
		err := e.Execute(t.Context(), instruction(t, "i-1", v1.InstructionEtcdSnapshot, v1.EtcdSnapshotParams{Backup: "b1"}), rec)
		wantFailure(t, err, v1.CodeConflict, false, "backup b1 is Failed")
		if _, states := rec.final(); states[StepUploadSnapshot].State != v1.StepFailed || rec.Data != nil {
			t.Errorf("upload step %+v, data %s", states[StepUploadSnapshot], rec.Data)
		}
		if left, _ := filepath.Glob(filepath.Join(e.Root, dirBackup, "*")); len(left) != 0 {
			t.Errorf("files left: %v", left)
		}
	})

	for _, tt := range []struct {
		name   string
		cp     bool
		params any
		code   string
		want   string
	}{
		{"a worker has no etcd", false, v1.EtcdSnapshotParams{Backup: "b1"}, v1.CodeInvalidParameter, "this node has no etcd member"},
		{"a backup that is no name", true, v1.EtcdSnapshotParams{Backup: "../b1"}, v1.CodeInvalidParameter, `backup "../b1" is not a name`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tool := &etcdsnaptest.Tool{Snapshot: snap}
			e := fakeNode(t, tt.cp, tool)
			err := e.Execute(t.Context(), instruction(t, "i-1", v1.InstructionEtcdSnapshot, tt.params), &transferRecorder{})
			wantFailure(t, err, tt.code, false, tt.want)
			if n := tool.Count("etcd-snapshot save"); n != 0 {
				t.Errorf("kiln-kube etcd-snapshot save ran %d times", n)
			}
		})
	}
}

func TestEtcdRestoreStage(t *testing.T) {
	snap := []byte("an etcd snapshot")
	stage := func(b []byte) v1.EtcdRestoreParams {
		return v1.EtcdRestoreParams{Backup: "b1", Phase: v1.RestoreStage, Size: int64(len(b)), SHA256: digest(b)}
	}
	path := v1.AgentSnapshotPath + "i-stage"

	t.Run("downloads, checks, and keeps it once", func(t *testing.T) {
		tool := &etcdsnaptest.Tool{}
		e := fakeNode(t, true, tool)
		rec := &transferRecorder{Transfers: etcdsnaptest.Transfers{Downloads: map[string][]byte{path: snap}}}
		in := instruction(t, "i-stage", v1.InstructionEtcdRestore, stage(snap))
		if err := e.Execute(t.Context(), in, rec); err != nil {
			t.Fatalf("stage: %v", err)
		}
		if got, _ := os.ReadFile(e.snap().StagedPath("b1")); !bytes.Equal(got, snap) {
			t.Errorf("staged %q", got)
		}
		// Again (the controller lost the result): nothing is downloaded.
		again := &transferRecorder{Transfers: etcdsnaptest.Transfers{DownloadErr: errors.New("downloaded again")}}
		if err := e.Execute(t.Context(), in, again); err != nil {
			t.Fatalf("stage again: %v", err)
		}
		if _, states := again.final(); states[StepDownloadSnapshot].Message != "already staged" {
			t.Errorf("staged again: %+v", states)
		}
		if n := tool.Count("etcd-snapshot status"); n != 1 {
			t.Errorf("status ran %d times, want 1", n)
		}
	})

	for _, tt := range []struct {
		name      string
		body      []byte
		params    v1.EtcdRestoreParams
		code      string
		retryable bool
		want      string
	}{
		{"cut short", snap[:5], stage(snap), v1.CodeUnavailable, true, "arrived as 5 bytes"},
		{"not a snapshot", []byte("garbage!"), stage([]byte("garbage!")), v1.CodeInvalidParameter, false,
			"backup b1 is not a usable etcd snapshot: kiln-kube etcd-snapshot: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := fakeNode(t, true, &etcdsnaptest.Tool{})
			rec := &transferRecorder{Transfers: etcdsnaptest.Transfers{Downloads: map[string][]byte{path: tt.body}}}
			err := e.Execute(t.Context(), instruction(t, "i-stage", v1.InstructionEtcdRestore, tt.params), rec)
			wantFailure(t, err, tt.code, tt.retryable, tt.want)
			if left, _ := filepath.Glob(filepath.Join(e.Root, dirBackup, "*")); len(left) != 0 {
				t.Errorf("files left: %v", left)
			}
		})
	}

	t.Run("bad params", func(t *testing.T) {
		e := fakeNode(t, true, &etcdsnaptest.Tool{})
		for _, p := range []v1.EtcdRestoreParams{
			{Backup: "b1", Phase: "rewind"},
			{Backup: "b1", Phase: v1.RestoreStage, Size: 3, SHA256: "abc"},
			{Backup: "b1", Phase: v1.RestoreEtcd, Size: 3, SHA256: digest(snap)},
			{Backup: "B/1", Phase: v1.RestoreStop},
		} {
			err := e.Execute(t.Context(), instruction(t, "i", v1.InstructionEtcdRestore, p), &transferRecorder{})
			wantFailure(t, err, v1.CodeInvalidParameter, false, "etcd-restore params")
		}
	})
}

// running reports whether component runs on e's root (its pid file names a
// live process).
func running(e *Executor, component string) bool {
	_, ok := e.sup.readPID(component)
	return ok
}

func TestEtcdRestorePhases(t *testing.T) {
	snap := []byte("an etcd snapshot")
	tool := &etcdsnaptest.Tool{}
	e := fakeNode(t, true, tool)
	all, m, err := e.installed()
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "cp-0" || m.PeerURL != "https://127.0.0.1:2380" || m.ClientURL != "https://127.0.0.1:2379" {
		t.Fatalf("member %+v", m)
	}
	// The node runs its install, on data of its own.
	for _, s := range all {
		if _, err := e.sup.ensure(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := atomicfile.WriteMkdirAll(filepath.Join(m.DataDir, "member", "wal", "0.wal"), []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	specsBefore, _ := os.ReadFile(filepath.Join(e.Root, specsFile))
	rec := &transferRecorder{Transfers: etcdsnaptest.Transfers{Downloads: map[string][]byte{v1.AgentSnapshotPath + "i-stage": snap}}}
	phase := func(id, phase string) error {
		p := v1.EtcdRestoreParams{Backup: "b1", Phase: phase, Size: int64(len(snap)), SHA256: digest(snap),
			InitialCluster: "cp-0=https://127.0.0.1:2380,cp-1=https://127.0.0.2:2380", Token: "restore-b1"}
		return e.Execute(t.Context(), instruction(t, id, v1.InstructionEtcdRestore, p), rec)
	}

	// restore before stage: nothing to restore.
	err = phase("i-restore", v1.RestoreEtcd)
	wantFailure(t, err, v1.CodeConflict, false, "backup b1 is not staged on this node")
	if err := phase("i-stage", v1.RestoreStage); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if err := phase("i-stop", v1.RestoreStop); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for _, c := range []string{Etcd, APIServer, ControllerManager, Scheduler} {
		if running(e, c) {
			t.Errorf("%s runs after stop", c)
		}
	}
	if !running(e, Kubelet) {
		t.Error("the kubelet stopped with the control plane")
	}
	if after, _ := os.ReadFile(filepath.Join(e.Root, specsFile)); !bytes.Equal(after, specsBefore) {
		t.Error("stop changed the recorded components")
	}

	// An agent restarted between stop and restore started everything again
	// (Resume): restore stops it.
	if err := e.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := phase("i-restore", v1.RestoreEtcd); err != nil {
		t.Fatalf("restore: %v", err)
	}
	wal := func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "member", "wal", "0.wal"))
		return string(b)
	}
	before := m.DataDir + ".before-b1"
	if wal(m.DataDir) != string(snap) || wal(before) != "before" {
		t.Errorf("data dir %q, moved aside %q", wal(m.DataDir), wal(before))
	}
	if !running(e, Etcd) || running(e, APIServer) {
		t.Errorf("after restore: etcd runs %v (want true), apiserver %v (want false)", running(e, Etcd), running(e, APIServer))
	}

	// Again: nothing is restored again.
	if err := phase("i-restore", v1.RestoreEtcd); err != nil {
		t.Fatalf("restore again: %v", err)
	}
	if n := tool.Count("etcd-snapshot restore"); n != 1 {
		t.Errorf("restored %d times, want 1", n)
	}

	// An agent that died between moving the data dir aside and putting the
	// restored one in place, restarted, started etcd on a new data dir: the
	// restore puts the restored one in place and keeps what was moved aside.
	e.sup.stop(Etcd)
	restoring := m.DataDir + ".restoring"
	if err := os.Rename(m.DataDir, restoring); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteMkdirAll(filepath.Join(m.DataDir, "member", "wal", "0.wal"), []byte("fresh"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := phase("i-restore", v1.RestoreEtcd); err != nil {
		t.Fatalf("restore after a crash: %v", err)
	}
	if wal(m.DataDir) != string(snap) || wal(before) != "before" {
		t.Errorf("after a crash: data dir %q, moved aside %q", wal(m.DataDir), wal(before))
	}
	if n := tool.Count("etcd-snapshot restore"); n != 1 {
		t.Errorf("restored %d times, want 1", n)
	}
	if _, err := os.Stat(restoring); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is left: %v", restoring, err)
	}
}

// TestBackupAndRestoreThreeControlPlanes takes a snapshot of a real
// three-member control plane (two members joined with kiln-kube etcd
// --join), changes the cluster, and restores the snapshot on every node,
// phase by phase as the plan does: what was written after the snapshot is
// gone, what was before is back, and etcd has the three members it had (a
// restored data dir makes --join add none).
func TestBackupAndRestoreThreeControlPlanes(t *testing.T) {
	bin := kubeBinary(t)
	var nodes []distrolocal.Node
	var members []distrolocal.Member
	var used, initial []string
	for i, want := range []string{"127.0.0.7", "127.0.0.8", "127.0.0.9"} {
		addr := freeAddress(t, want, used...)
		used = append(used, addr)
		n := distrolocal.Node{Name: fmt.Sprintf("bk-cp-%d", i), Role: v1.RoleControlPlane, Address: addr}
		nodes = append(nodes, n)
		members = append(members, distrolocal.Member{Name: n.Name, Address: n.Address})
		initial = append(initial, n.Name+"="+distrolocal.EtcdPeerURL(addr))
	}
	c := newCluster(t, members)
	execs := make([]*Executor, len(nodes))
	for i, n := range nodes {
		execs[i] = newExecutor(t, bin, n.Name)
	}
	install(t, execs[0], c.params(t, nodes[0], false), controlPlaneSteps)
	all := func(what string, fn func(i int) error) {
		t.Helper()
		errs := make(chan error, len(execs))
		for i := range execs {
			go func() { errs <- fn(i) }()
		}
		for range execs {
			if err := <-errs; err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	all("join", func(i int) error {
		if i == 0 {
			return nil
		}
		return execs[i].Execute(t.Context(), c.params(t, nodes[i], true), &recorder{})
	})

	admin := adminClient(t, c.ca, c.endpoint)
	if err := admin.EnsureNamespace(t.Context(), "kiln-system"); err != nil {
		t.Fatal(err)
	}
	if err := admin.ApplyConfigMap(t.Context(), "kiln-system", "kept", map[string]string{"v": "1"}); err != nil {
		t.Fatal(err)
	}

	// The snapshot, from a member that joined.
	snap := &transferRecorder{}
	start := time.Now()
	if err := execs[1].Execute(t.Context(), instruction(t, "i-snap", v1.InstructionEtcdSnapshot, v1.EtcdSnapshotParams{Backup: "b1"}), snap); err != nil {
		t.Fatalf("etcd-snapshot: %v", err)
	}
	var res v1.EtcdSnapshotResult
	if err := json.Unmarshal(snap.Data, &res); err != nil || res.Size != int64(len(snap.Uploads[v1.AgentSnapshotPath+"i-snap"])) ||
		res.Etcd.TotalKeys == 0 || res.Etcd.Revision == 0 {
		t.Fatalf("snapshot result %s (%v)", snap.Data, err)
	}
	t.Logf("snapshot of %d bytes, %d keys at revision %d, in %s", res.Size, res.Etcd.TotalKeys, res.Etcd.Revision, time.Since(start).Round(time.Millisecond))

	if err := admin.ApplyConfigMap(t.Context(), "kiln-system", "kept", map[string]string{"v": "2"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.ApplyConfigMap(t.Context(), "kiln-system", "lost", map[string]string{"v": "x"}); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	recs := make([]*transferRecorder, len(execs))
	for i := range recs {
		recs[i] = &transferRecorder{Transfers: etcdsnaptest.Transfers{Downloads: map[string][]byte{
			v1.AgentSnapshotPath + "i-stage": snap.Uploads[v1.AgentSnapshotPath+"i-snap"]}}}
	}
	for _, phase := range []string{v1.RestoreStage, v1.RestoreStop, v1.RestoreEtcd, v1.RestoreStart} {
		all(phase, func(i int) error {
			p := v1.EtcdRestoreParams{Backup: "b1", Phase: phase, Size: res.Size, SHA256: res.SHA256,
				InitialCluster: strings.Join(initial, ","), Token: "kiln-restore-b1"}
			return execs[i].Execute(t.Context(), instruction(t, "i-"+phase, v1.InstructionEtcdRestore, p), recs[i])
		})
		t.Logf("phase %s done after %s", phase, time.Since(start).Round(time.Millisecond))
	}
	steps, _ := recs[2].final()
	if want := []string{StepDownloadSnapshot, StepCheckSnapshot, StepStopControlPlane, StepRestoreEtcd, StepStartEtcd, StepEtcdHealthy,
		StepStartAPIServer, StepAPIServerReady, StepStartControllerManager, StepStartScheduler, StepStartKubelet}; !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}

	waitfor.Cond(t, "the restored ConfigMap", time.Minute, func() (bool, error) {
		data, err := admin.GetConfigMap(t.Context(), "kiln-system", "kept")
		if err != nil {
			return false, waitfor.NotYet(err)
		}
		if data["v"] != "1" {
			return false, fmt.Errorf("kept is %v, want the snapshot's v=1", data)
		}
		return true, nil
	})
	if data, err := admin.GetConfigMap(t.Context(), "kiln-system", "lost"); err == nil {
		t.Errorf("a ConfigMap made after the snapshot is there after the restore: %v", data)
	}
	// Three voting members, as before: a member's --join added none.
	client, err := fileClient(execs[0].Root, distrolocal.FileAPIServerEtcdCert, distrolocal.FileAPIServerEtcdKey)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, distrolocal.EtcdClientURL(nodes[0].Address)+"/v3/cluster/member/list", strings.NewReader("{}"))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	type etcdMember struct {
		Name      string `json:"name"`
		IsLearner bool   `json:"isLearner"`
	}
	var list struct {
		Members []etcdMember `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Members) != 3 || slices.ContainsFunc(list.Members, func(m etcdMember) bool { return m.IsLearner }) {
		t.Errorf("etcd members after the restore: %+v", list.Members)
	}
	for _, e := range execs {
		if _, err := os.Stat(filepath.Join(e.Root, dirEtcd+".before-b1", "member")); err != nil {
			t.Errorf("the data dir before the restore: %v", err)
		}
	}
	done := make(chan struct{})
	go func() { execs[1].Stop(); close(done) }()
	execs[2].Stop()
	<-done
}
