-- Project secrets (PUT /v1/projects/{p}/secrets/{name}): named values that
-- profile packs name as ${secret.NAME.KEY}. One document per secret, sealed
-- whole (the data is in it) when kilnd has a key, deleted with its project.
-- Kept column for column in step with the other store's migrations.

-- +goose Up
CREATE TABLE project_secrets (
    project    text COLLATE "C" NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       text COLLATE "C" NOT NULL,
    etag       text   NOT NULL,
    created_at bigint NOT NULL,
    data       text   NOT NULL,
    PRIMARY KEY (project, name)
);

-- +goose Down
DROP TABLE project_secrets;
