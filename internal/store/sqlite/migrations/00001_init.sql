-- Kiln store schema for SQLite. Times are int64 unix nanoseconds (0 = unset),
-- documents are JSON text. Kept column for column in step with
-- ../../postgres/migrations so one set of queries serves both.

-- +goose Up
CREATE TABLE projects (
    name       TEXT    NOT NULL PRIMARY KEY,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL
);

CREATE TABLE clusters (
    project            TEXT    NOT NULL REFERENCES projects (name),
    name               TEXT    NOT NULL,
    etag               TEXT    NOT NULL,
    spec               TEXT    NOT NULL,
    status             TEXT    NOT NULL,
    provisioning_state TEXT    NOT NULL,
    lease_owner        TEXT    NOT NULL DEFAULT '',
    lease_token        INTEGER NOT NULL DEFAULT 0,
    lease_expiry       INTEGER NOT NULL DEFAULT 0,
    dequeues           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (project, name)
);

-- Serves ClaimCluster: only clusters with work to do are in it, ordered by
-- lease expiry. The WHERE must stay textually identical to the one in the
-- claim query (sqlstore/lease.go) or SQLite will not use the index.
CREATE INDEX clusters_claim ON clusters (lease_expiry)
    WHERE provisioning_state IN ('Creating', 'Updating', 'Deleting');

-- The last lease token of a deleted cluster, so a cluster created again under
-- the same name never hands out a token an old worker still holds.
CREATE TABLE lease_tombstones (
    project     TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    lease_token INTEGER NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE TABLE nodes (
    project    TEXT    NOT NULL,
    cluster    TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, cluster, name),
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

-- Operations and events outlive their cluster: a client polls the delete
-- operation after the cluster is gone.
CREATE TABLE operations (
    id         TEXT    NOT NULL PRIMARY KEY,
    project    TEXT    NOT NULL,
    cluster    TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    start_time INTEGER NOT NULL,
    end_time   INTEGER NOT NULL DEFAULT 0,
    steps      TEXT    NOT NULL,
    error      TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX operations_cluster ON operations (project, cluster, id);

CREATE TABLE cloud_accounts (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE TABLE profiles (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE TABLE events (
    id      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    project TEXT    NOT NULL,
    cluster TEXT    NOT NULL,
    time    INTEGER NOT NULL,
    data    TEXT    NOT NULL
);

CREATE INDEX events_cluster ON events (project, cluster, id);

-- +goose Down
DROP TABLE events;
DROP TABLE profiles;
DROP TABLE cloud_accounts;
DROP TABLE operations;
DROP TABLE nodes;
DROP TABLE lease_tombstones;
DROP TABLE clusters;
DROP TABLE projects;
