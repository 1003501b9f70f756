-- Backups (POST /v1/projects/{p}/clusters/{c}/backups, and those
-- spec.backup.schedule takes): one document per etcd snapshot of a cluster,
-- with where its sealed object is kept. A backup outlives its cluster (a new
-- cluster can be made from it), so it is filed under the cluster's name with
-- no foreign key to the cluster, and goes only with its project. The index
-- serves the list, newest first. Kept column for column in step with the
-- other store's migrations.

-- +goose Up
CREATE TABLE backups (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    cluster    TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, cluster, name)
);

CREATE INDEX backups_newest ON backups (project, cluster, created_at);

-- +goose Down
DROP TABLE backups;
