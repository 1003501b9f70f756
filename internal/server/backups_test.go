package server_test

import (
	"net/http"
	"strings"
	"testing"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/provider/sim"
)

// Backups of a cluster whose etcd Kiln does not run are refused with the
// reason, and bad input is refused naming its field; nothing begins.
func TestBackupRefusals(t *testing.T) {
	h := newHarness(t, withPlan)
	h.backend(sim.New())
	h.project("p")
	_, opID := h.createCluster("p", "c", simBody)
	h.await(opID)
	base := "/v1/projects/p/clusters/c"

	if e := h.must(http.StatusConflict, "POST", base+"/backups", "").errorBody(t); !strings.Contains(e.Message, "runs no etcd") {
		t.Errorf("backup of a sim cluster: %+v", e)
	}
	if e := h.must(http.StatusBadRequest, "POST", base+"/backups", `{"name": "Not_A_Label"}`).errorBody(t); e.Target != "name" {
		t.Errorf("a backup named Not_A_Label: %+v", e)
	}
	h.must(http.StatusBadRequest, "POST", base+"/backups", `{"nmae": "x"}`)
	if e := h.must(http.StatusBadRequest, "POST", base+"/restore", `{}`).errorBody(t); e.Code != v1.CodeMissingParameter || e.Target != "backup" {
		t.Errorf("a restore naming no backup: %+v", e)
	}
	if e := h.must(http.StatusConflict, "POST", base+"/restore", `{"backup": "b"}`).errorBody(t); !strings.Contains(e.Message, "runs no etcd") {
		t.Errorf("a restore of a sim cluster: %+v", e)
	}
	if got := h.cluster("p", "c"); got.Status.CurrentOperation != opID {
		t.Errorf("an operation began: %s", got.Status.CurrentOperation)
	}

	if e := h.must(http.StatusNotFound, "GET", base+"/backups/nope", "").errorBody(t); e.Target != "backup" || !strings.Contains(e.Message, `backup "nope"`) {
		t.Errorf("a missing backup: %+v", e)
	}
	var list v1.List[v1.Backup]
	h.must(http.StatusOK, "GET", "/v1/projects/p/clusters/gone/backups", "").decode(t, &list)
	if len(list.Value) != 0 {
		t.Errorf("backups of a cluster that never was: %+v", list.Value)
	}

	if e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/d",
		`{"spec": {"provider": "sim", "restoreFrom": {"cluster": "c", "backup": "nope"}}}`).errorBody(t); e.Target != "spec.restoreFrom" {
		t.Errorf("a cluster made from a backup that does not exist: %+v", e)
	}
	h.must(http.StatusNotFound, "GET", "/v1/projects/p/clusters/d", "")
	if e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p/clusters/d",
		`{"spec": {"provider": "edge", "distribution": "kubeadm", "kubernetesVersion": "v1.35.4", "restoreFrom": {"cluster": "c", "backup": "b"}}}`).errorBody(t); e.Target != "spec.restoreFrom" || !strings.Contains(e.Message, "kiln cluster restore") {
		t.Errorf("a kubeadm cluster made from a backup: %+v", e)
	}

	if e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p", `{"backupLocation": {"s3": {"cloudAccount": "a"}}}`).errorBody(t); e.Target != "backupLocation.s3.bucket" {
		t.Errorf("a backup location without a bucket: %+v", e)
	}
	if e := h.must(http.StatusBadRequest, "PUT", "/v1/projects/p", `{"backupLocation": {"s3": {"cloudAccount": "nope", "bucket": "b"}}}`).errorBody(t); e.Target != "backupLocation.s3.cloudAccount" {
		t.Errorf("a backup location with a cloud account that does not exist: %+v", e)
	}
}
