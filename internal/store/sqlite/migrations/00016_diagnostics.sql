-- Diagnostics bundles (POST /v1/projects/{p}/clusters/{c}/diagnostics, and one
-- gathered when an operation fails): a tar.gz of what Kiln knows of a cluster,
-- with its description as a document. The newest few are kept per cluster
-- (store.MaxDiagnostics); they go with their cluster. Kept column for column in
-- step with the other store's migrations.

-- +goose Up
CREATE TABLE diagnostics (
    id         TEXT    NOT NULL PRIMARY KEY,
    project    TEXT    NOT NULL,
    cluster    TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    bundle     BLOB    NOT NULL,
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

CREATE INDEX diagnostics_cluster ON diagnostics (project, cluster, created_at);

-- +goose Down
DROP TABLE diagnostics;
