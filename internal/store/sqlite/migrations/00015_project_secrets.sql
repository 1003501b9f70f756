-- Project secrets (PUT /v1/projects/{p}/secrets/{name}): named values that
-- profile packs name as ${secret.NAME.KEY}. One document per secret, sealed
-- whole (the data is in it) when kilnd has a key, deleted with its project.
-- Kept column for column in step with the other store's migrations.

-- +goose Up
CREATE TABLE project_secrets (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, name)
);

-- +goose Down
DROP TABLE project_secrets;
