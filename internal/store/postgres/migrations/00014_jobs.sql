-- Jobs submitted through Kiln (POST .../clusters/{c}/jobs): one document
-- per job, deleted with its cluster. Kept column for column in step with
-- the other store's migrations.

-- +goose Up
CREATE TABLE jobs (
    project    text COLLATE "C" NOT NULL,
    cluster    text COLLATE "C" NOT NULL,
    name       text COLLATE "C" NOT NULL,
    etag       text NOT NULL,
    created_at bigint NOT NULL,
    data       text NOT NULL,
    PRIMARY KEY (project, cluster, name),
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

-- +goose Down
DROP TABLE jobs;
