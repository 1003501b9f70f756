package e2e

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/test/waitfor"
)

// TestBackupRestore: a backup of a running cluster; a namespace deleted
// and another made; a damaged backup refused before anything stops; the
// good one restored (the deleted namespace and its objects back, the later
// one gone); and a second cluster made from the backup with the same
// objects and none of the first cluster's nodes.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	e := start(t, "kilnd")
	e.create(localCluster("src", 1, false, 1))
	e.mustKubectl("src", "create", "namespace", "keep")
	e.mustKubectl("src", "-n", "keep", "create", "configmap", "settings", "--from-literal=colour=blue")

	out := e.kiln("backup", "create", "src", "--name", "b1", "--wait")
	t.Logf("kiln backup create src --name b1 --wait:\n%s", out)
	b1, err := e.c.GetBackup(t.Context(), "default", "src", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if b1.State != v1.BackupSucceeded || b1.Size == 0 || len(b1.SHA256) != 64 || b1.Etcd == nil || b1.Etcd.Revision == 0 ||
		b1.Node != "src-cp-0" || b1.Location != "directory" {
		t.Fatalf("backup b1: %+v (etcd %+v), want Succeeded with its size, sha256 and revision, taken on src-cp-0, in the directory", b1, b1.Etcd)
	}
	if cl := e.cluster("src"); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("after the backup the cluster is %s", cl.Status.ProvisioningState)
	}
	// The stored object is sealed: the configmap's value is not in it.
	objects, _ := filepath.Glob(filepath.Join(e.data, "backups", "default", "src", "*", "b1.snapshot"))
	if len(objects) != 1 {
		t.Fatalf("stored objects of b1: %v", objects)
	}
	if raw, err := os.ReadFile(objects[0]); err != nil || strings.Contains(string(raw), "colour") {
		t.Errorf("the stored snapshot (%v) holds the configmap's key in the clear", err)
	}

	e.mustKubectl("src", "delete", "namespace", "keep", "--wait=true", "--timeout=120s")
	e.mustKubectl("src", "create", "namespace", "later")

	// A second backup, damaged where it is kept: its restore fails at
	// check-backup, and nothing is stopped.
	e.kiln("backup", "create", "src", "--name", "b2", "--wait")
	b2, err := e.c.GetBackup(t.Context(), "default", "src", "b2")
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(filepath.Dir(objects[0]), "b2.snapshot")
	raw, err := os.ReadFile(damaged)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x20
	if err := os.WriteFile(damaged, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, opID, err := e.c.RestoreCluster(t.Context(), "default", "src", b2.Name)
	if err != nil {
		t.Fatal(err)
	}
	op := e.finish(opID)
	if op.Status != v1.OpFailed || op.Error == nil || !strings.Contains(op.Error.Message, "does not check out") {
		t.Fatalf("restore of the damaged backup: %s %+v", op.Status, op.Error)
	}
	for _, s := range op.Properties.Steps {
		if s.Name != "check-backup" && s.State != v1.StepPending {
			t.Errorf("step %s is %s after the backup was refused: nothing after check-backup may run", s.Name, s.State)
		}
	}
	if cl := e.cluster("src"); cl.Status.ProvisioningState != v1.StateSucceeded {
		t.Errorf("after the refused restore the cluster is %s, want Succeeded: nothing was stopped", cl.Status.ProvisioningState)
	}
	e.mustKubectl("src", "get", "namespace", "later")

	// The good one: what was deleted is back, what came later is gone.
	out = e.kiln("cluster", "restore", "src", "--backup", "b1", "--yes", "--wait")
	t.Logf("kiln cluster restore src --backup b1:\n%s", out)
	if got := e.mustKubectl("src", "-n", "keep", "get", "configmap", "settings", "-o", "jsonpath={.data.colour}"); got != "blue" {
		t.Errorf("configmap keep/settings after the restore: colour %q, want blue", got)
	}
	if out, err := e.kubectl("src", "get", "namespace", "later"); err == nil {
		t.Errorf("namespace later, made after the backup, is still there after the restore:\n%s", out)
	}
	for name, n := range e.kubeNodes("src") {
		if !n.ready() {
			t.Errorf("node %s is not Ready after the restore", name)
		}
	}
	if list := e.kiln("backup", "list", "src"); !strings.Contains(list, "b1") || !strings.Contains(list, "b2") {
		t.Errorf("kiln backup list src:\n%s", list)
	}

	// A second cluster made from the backup, as a user makes it.
	out = e.kiln("cluster", "create", "dst", "--provider", "local", "--workers", "1", "--from-backup", "src/b1", "--wait")
	t.Logf("kiln cluster create dst --from-backup src/b1:\n%s", out)
	if rf := e.cluster("dst").Spec.RestoreFrom; rf == nil || *rf != (v1.RestoreFrom{Cluster: "src", Backup: "b1"}) {
		t.Errorf("dst's spec.restoreFrom: %+v", rf)
	}
	if got := e.mustKubectl("dst", "-n", "keep", "get", "configmap", "settings", "-o", "jsonpath={.data.colour}"); got != "blue" {
		t.Errorf("configmap keep/settings in the cluster made from b1: colour %q, want blue", got)
	}
	var names []string
	for name, n := range e.kubeNodes("dst") {
		names = append(names, name)
		if !n.ready() {
			t.Errorf("node %s of dst is not Ready", name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"dst-cp-0", "dst-default-0"}) {
		t.Errorf("nodes of the cluster made from b1: %v, want dst's own", names)
	}

	// A backup is deleted with its stored snapshot.
	e.kiln("backup", "delete", "src", "b2")
	if _, err := os.Stat(damaged); !os.IsNotExist(err) {
		t.Errorf("b2's snapshot after its delete: %v", err)
	}
}

// TestScheduledBackupsInS3: a project whose backups are kept in an S3
// bucket (the local AWS); a cluster with spec.backup every 15 s, keep 1:
// scheduled backups are taken by themselves, the older pruned with its
// object, what is in the bucket is sealed, and a restore reads it back.
func TestScheduledBackupsInS3(t *testing.T) {
	t.Parallel()
	a := startLocalAWS(t)
	e := start(t, "kilnd", "--backup-check-interval", "5s", "--aws") // --aws: the provider its cloud account is of
	ctx := t.Context()
	bucket := s3.NewFromConfig(a.sdk(), func(o *s3.Options) { o.UsePathStyle = true })
	if _, err := bucket.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: awssdk.String("kiln-backups")}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateCloudAccount(ctx, "default", a.account("store", awsKey, awsSecret)); err != nil {
		t.Fatal(err)
	}
	p, err := e.c.GetProject(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	p.BackupLocation = &v1.BackupLocation{S3: &v1.S3Location{CloudAccount: "store", Bucket: "kiln-backups", Prefix: "e2e"}}
	if _, err := e.c.PutProject(ctx, p); err != nil {
		t.Fatal(err)
	}

	cl := localCluster("sched", 1, false, 0)
	// Every 15 s (cron's descriptor), not every minute: the test waits for two.
	cl.Spec.Backup = &v1.BackupSchedule{Schedule: "@every 15s", Keep: 1}
	e.create(cl)
	e.mustKubectl("sched", "create", "namespace", "keep")

	// Two scheduled backups succeed; the first is then pruned.
	var kept []v1.Backup
	waitfor.Cond(t, "two scheduled backups, the first pruned", 5*time.Minute, func() (bool, error) {
		bs, err := e.c.ListBackups(ctx, "default", "sched")
		if err != nil {
			return false, err
		}
		kept = bs
		ops, err := e.c.ListOperations(ctx, "default", "sched")
		if err != nil {
			return false, err
		}
		backups := 0
		for _, op := range ops {
			if op.Properties.Kind == v1.KindBackup && op.Status == v1.OpSucceeded {
				backups++
			}
		}
		return backups >= 2 && len(bs) == 1 && bs[0].State == v1.BackupSucceeded, nil
	})
	b := kept[0]
	if !b.Scheduled || !strings.HasPrefix(b.Location, "s3://kiln-backups/e2e") {
		t.Errorf("kept backup %+v, want a scheduled one in s3://kiln-backups/e2e", b)
	}
	objects, err := bucket.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: awssdk.String("kiln-backups"), Prefix: awssdk.String("e2e/")})
	if err != nil {
		t.Fatal(err)
	}
	if len(objects.Contents) != 1 || !strings.HasSuffix(*objects.Contents[0].Key, "/"+b.Name+".snapshot") {
		var keys []string
		for _, o := range objects.Contents {
			keys = append(keys, *o.Key)
		}
		t.Fatalf("objects in the bucket: %v, want only the kept backup %s's", keys, b.Name)
	}
	got, err := bucket.GetObject(ctx, &s3.GetObjectInput{Bucket: awssdk.String("kiln-backups"), Key: objects.Contents[0].Key})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(got.Body)
	got.Body.Close()
	if err != nil || strings.Contains(string(raw), "kube-system") || !strings.HasPrefix(string(raw), "kiln-sealed-stream:") {
		t.Errorf("the object in the bucket (%v) is not sealed: it starts %q", err, raw[:min(len(raw), 40)])
	}

	// Restored from the bucket: the namespace deleted since is back. The
	// schedule stops first, so that it does not take the next backup
	// between the delete and the restore.
	spec := e.cluster("sched").Spec
	spec.Backup = nil
	_, opID, err := e.c.PutCluster(ctx, "default", &v1.Cluster{Name: "sched", Spec: spec}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.wait("sched", opID)
	e.mustKubectl("sched", "delete", "namespace", "keep", "--wait=true", "--timeout=120s")
	_, opID, err = e.c.RestoreCluster(ctx, "default", "sched", b.Name)
	if err != nil {
		t.Fatal(err)
	}
	e.wait("sched", opID)
	e.mustKubectl("sched", "get", "namespace", "keep")
}

// TestDockerBackupRestore: the same on real nodes (docker): a backup taken
// on a node container, a namespace deleted, the backup restored; the
// namespace is back, the nodes Ready, and CoreDNS runs its containers
// again through the restored API.
func TestDockerBackupRestore(t *testing.T) {
	t.Parallel()
	e := startDocker(t)
	e.create(dockerCluster("real", "", 1, false, 1))
	e.mustKubectl("real", "create", "namespace", "keep")
	e.mustKubectl("real", "-n", "keep", "create", "configmap", "settings", "--from-literal=colour=green")
	e.kiln("backup", "create", "real", "--name", "before", "--wait")
	e.mustKubectl("real", "delete", "namespace", "keep", "--wait=true", "--timeout=120s")

	t0 := time.Now()
	e.kiln("cluster", "restore", "real", "--backup", "before", "--yes", "--wait")
	t.Logf("restored in %s", time.Since(t0).Round(time.Second))
	if got := e.mustKubectl("real", "-n", "keep", "get", "configmap", "settings", "-o", "jsonpath={.data.colour}"); got != "green" {
		t.Errorf("configmap keep/settings after the restore: colour %q, want green", got)
	}
	for name, n := range e.kubeNodes("real") {
		if !n.ready() {
			t.Errorf("node %s is not Ready after the restore", name)
		}
	}
	waitfor.Cond(t, "CoreDNS to run after the restore", 3*time.Minute, func() (bool, error) {
		out, err := e.kubectl("real", "-n", "kube-system", "get", "pods", "-l", "k8s-app=kube-dns",
			"--field-selector", "status.phase=Running", "-o", "name")
		return err == nil && strings.Contains(out, "pod/"), nil
	})
}
