package storetest

import (
	"time"

	v1 "kiln.dev/kiln/api/v1"
	"kiln.dev/kiln/internal/store"
)

// testBackups: a backup's record is created once (IfNoneMatch), read back
// whole, replaced conditionally keeping its created time, and deleted
// conditionally; its project must exist, its cluster need not; it takes no
// fence.
func testBackups(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	end := e.clock.Now().Add(time.Minute)
	b := &store.Backup{Project: "p", ClusterUID: "uid-1", Object: "p/c/c-1.snap.sealed", Backup: v1.Backup{
		Name: "c-1", ID: "/v1/projects/p/clusters/c/backups/c-1", Cluster: "c", State: v1.BackupCreating,
		Operation: "op-1", Scheduled: true, Node: "c-cp-0", Location: "directory", Size: 2 << 20, SHA256: "ab12",
		Etcd:              &v1.EtcdSnapshotStatus{Hash: 4242, Revision: 17, TotalKeys: 900, TotalSize: 2 << 20, Version: "3.6.0"},
		KubernetesVersion: "v1.36.3",
		Network:           &v1.Network{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", CNI: "calico"},
		EndTime:           &end,
	}}
	wantErr(t, "PutBackup", s.PutBackup(ctx, b, store.Cond{IfNoneMatch: "*"}), nil)
	if b.ETag == "" || !b.CreatedAt.Equal(e.clock.Now()) {
		t.Fatalf("PutBackup: etag %q created %v; want an etag, created now (%v)", b.ETag, b.CreatedAt, e.clock.Now())
	}
	again := *b
	wantErr(t, "PutBackup again", s.PutBackup(ctx, &again, store.Cond{IfNoneMatch: "*"}), store.ErrExists)
	got, err := s.GetBackup(ctx, "p", "c", "c-1")
	wantErr(t, "GetBackup", err, nil)
	diff(t, "backup", b, got)

	orphan := &store.Backup{Project: "nope", Backup: v1.Backup{Name: "x", Cluster: "c"}}
	wantErr(t, "PutBackup of a missing project", s.PutBackup(ctx, orphan, store.Cond{}), store.ErrNotFound)
	fenced := &store.Backup{Project: "p", Backup: v1.Backup{Name: "f", Cluster: "c"}}
	if err := s.PutBackup(ctx, fenced, store.Cond{Fence: &store.Fence{Owner: "w", Token: 1}}); err == nil {
		t.Fatal("PutBackup with a fence: no error; a backup has no lease to fence it")
	}
	_, err = s.GetBackup(ctx, "p", "other", "c-1")
	wantErr(t, "GetBackup under another cluster", err, store.ErrNotFound)

	e.clock.Advance(time.Hour)
	created, old := got.CreatedAt, got.ETag
	got.State, got.Error = v1.BackupFailed, "etcd snapshot: no leader"
	wantErr(t, "PutBackup IfMatch", s.PutBackup(ctx, got, store.Cond{IfMatch: old}), nil)
	if got.ETag == old || !got.CreatedAt.Equal(created) {
		t.Fatalf("replaced backup: etag %q (was %q), created %v (was %v); want a new etag, the same created time",
			got.ETag, old, got.CreatedAt, created)
	}
	wantErr(t, "PutBackup stale", s.PutBackup(ctx, got, store.Cond{IfMatch: old}), store.ErrPreconditionFailed)
	wantErr(t, "PutBackup IfMatch of a missing backup", s.PutBackup(ctx,
		&store.Backup{Project: "p", Backup: v1.Backup{Name: "missing", Cluster: "c"}}, store.Cond{IfMatch: "*"}), store.ErrPreconditionFailed)
	reread, err := s.GetBackup(ctx, "p", "c", "c-1")
	wantErr(t, "GetBackup after replace", err, nil)
	diff(t, "replaced backup", got, reread)

	wantErr(t, "DeleteBackup stale", s.DeleteBackup(ctx, "p", "c", "c-1", store.Cond{IfMatch: old}), store.ErrPreconditionFailed)
	wantErr(t, "DeleteBackup", s.DeleteBackup(ctx, "p", "c", "c-1", store.Cond{IfMatch: got.ETag}), nil)
	_, err = s.GetBackup(ctx, "p", "c", "c-1")
	wantErr(t, "GetBackup deleted", err, store.ErrNotFound)
	wantErr(t, "DeleteBackup again", s.DeleteBackup(ctx, "p", "c", "c-1", store.Cond{}), store.ErrNotFound)
}

// testBackupList: a cluster's backups are listed newest first, those
// created at the same time by name, page by page, apart from another
// cluster's; a bad token is ErrBadPageToken.
func testBackupList(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	put := func(cluster, name string) {
		t.Helper()
		b := &store.Backup{Project: "p", Backup: v1.Backup{Name: name, Cluster: cluster, State: v1.BackupSucceeded}}
		wantErr(t, "PutBackup "+name, s.PutBackup(ctx, b, store.Cond{IfNoneMatch: "*"}), nil)
	}
	put("c", "m-oldest")
	e.clock.Advance(time.Second)
	put("c", "b-same")
	put("c", "a-same")
	put("other", "o-1")
	e.clock.Advance(time.Second)
	put("c", "z-newest")
	want := []string{"z-newest", "a-same", "b-same", "m-oldest"}

	all, next, err := s.ListBackups(ctx, "p", "c", store.Page{})
	wantErr(t, "ListBackups", err, nil)
	diff(t, "backups, newest first", want, backupNames(all))
	if next != "" {
		t.Errorf("ListBackups of one page: next %q, want none", next)
	}
	for _, b := range all {
		if b.Project != "p" || b.Cluster != "c" {
			t.Errorf("listed backup %s is of %s/%s, want p/c", b.Name, b.Project, b.Cluster)
		}
	}
	var paged []string
	pg := store.Page{Limit: 1}
	for i := 0; ; i++ {
		list, next, err := s.ListBackups(ctx, "p", "c", pg)
		wantErr(t, "ListBackups page", err, nil)
		paged = append(paged, backupNames(list)...)
		if next == "" {
			break
		}
		if i > len(want) {
			t.Fatalf("ListBackups: still a next page after %d pages", i)
		}
		pg.Token = next
	}
	diff(t, "backups, a page at a time", want, paged)

	_, _, err = s.ListBackups(ctx, "p", "c", store.Page{Token: "Zm9v"})
	wantErr(t, "ListBackups with a bad token", err, store.ErrBadPageToken)
	none, _, err := s.ListBackups(ctx, "p", "never", store.Page{})
	wantErr(t, "ListBackups of a cluster without backups", err, nil)
	if len(none) != 0 {
		t.Errorf("ListBackups of a cluster without backups: %v", backupNames(none))
	}
}

// testBackupLifetime: backups outlive their cluster (deleted, or made again
// under its name) and go with their project.
func testBackupLifetime(e *env) {
	t, ctx, s := e.t, e.ctx, e.s
	e.project("p")
	cl, _ := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	b := &store.Backup{Project: "p", ClusterUID: cl.UID, Object: "obj", Backup: v1.Backup{Name: "c-1", Cluster: "c", State: v1.BackupSucceeded}}
	wantErr(t, "PutBackup", s.PutBackup(ctx, b, store.Cond{}), nil)
	e.finishDelete(e.claim("w", time.Hour))

	got, err := s.GetBackup(ctx, "p", "c", "c-1")
	wantErr(t, "GetBackup of a deleted cluster", err, nil)
	if got.ClusterUID != cl.UID {
		t.Errorf("backup of the deleted cluster: uid %q, want %q", got.ClusterUID, cl.UID)
	}
	again, _ := e.begin("p", "c", v1.KindCreate, v1.StateCreating)
	list, _, err := s.ListBackups(ctx, "p", "c", store.Page{})
	wantErr(t, "ListBackups", err, nil)
	if len(list) != 1 || list[0].ClusterUID == again.UID {
		t.Fatalf("backups filed under c once made again: %+v; want c-1 of the deleted cluster", list)
	}
	e.finishDelete(e.claim("w", time.Hour))

	wantErr(t, "DeleteProject", s.DeleteProject(ctx, "p", store.Cond{}), nil)
	e.project("p")
	_, err = s.GetBackup(ctx, "p", "c", "c-1")
	wantErr(t, "GetBackup once its project was deleted", err, store.ErrNotFound)
}

func backupNames(bs []*store.Backup) []string {
	names := []string{}
	for _, b := range bs {
		names = append(names, b.Name)
	}
	return names
}
