package etcdsnap_test

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/agent/etcdsnap"
	"kiln.dev/kiln/internal/names"
)

// A backup instruction's params come from the controller, and name files
// on the node: whatever they are, SnapshotParams and RestoreParams answer
// params whose backup is a name (no path) and whose phase is one of the
// restore's, or an error; ParseResult reads kiln-kube's output to a size
// and a digest or fails. None panics.
func FuzzParams(f *testing.F) {
	good, _ := json.Marshal(v1.EtcdRestoreParams{Backup: "b1", Phase: v1.RestoreEtcd, Size: 10, SHA256: strings.Repeat("a", 64),
		InitialCluster: "cp=https://10.0.0.2:2380", Token: "t", KubernetesVersion: "v1.36.3"})
	f.Add(good)
	f.Add([]byte(`{"backup": "../../etc/passwd", "phase": "stage"}`))
	f.Add([]byte(`{"size": 1, "sha256": "` + strings.Repeat("0", 64) + `", "etcd": {"revision": 2}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if p, err := etcdsnap.SnapshotParams(v1.Instruction{ID: "i", Kind: v1.InstructionEtcdSnapshot, Params: raw}); err == nil && !names.IsDNSLabel(p.Backup, 253) {
			t.Errorf("snapshot params accepted with backup %q", p.Backup)
		}
		if p, err := etcdsnap.RestoreParams(v1.Instruction{ID: "i", Kind: v1.InstructionEtcdRestore, Params: raw}); err == nil {
			if !names.IsDNSLabel(p.Backup, 253) || strings.ContainsAny(p.Backup, `/\`) {
				t.Errorf("restore params accepted with backup %q", p.Backup)
			}
			switch p.Phase {
			case v1.RestoreStage, v1.RestoreStop, v1.RestoreEtcd, v1.RestoreStart, v1.RestoreKubelet:
			default:
				t.Errorf("restore params accepted with phase %q", p.Phase)
			}
		}
		if res, err := etcdsnap.ParseResult(raw); err == nil && (res.Size <= 0 || len(res.SHA256) != 64) {
			t.Errorf("ParseResult accepted %+v", res)
		}
	})
}
