-- Jobs submitted through Kiln (POST .../clusters/{c}/jobs): one document
-- per job, deleted with its cluster. Kept column for column in step with
-- the other store's migrations.

-- +goose Up
CREATE TABLE jobs (
    project    TEXT NOT NULL,
    cluster    TEXT NOT NULL,
    name       TEXT NOT NULL,
    etag       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (project, cluster, name),
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE jobs;
