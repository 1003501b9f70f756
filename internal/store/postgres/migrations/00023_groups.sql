-- Sign-in with an OpenID Connect provider (internal/oidc): a project's
-- group bindings give every member of an identity provider's group a role
-- there, and a token made by a sign-in keeps the groups the provider said
-- the person is in (JSON, '[]' for other tokens). Kept column for column
-- in step with the other store's migrations.

-- +goose Up
CREATE TABLE group_bindings (
    project    text COLLATE "C" NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       text COLLATE "C" NOT NULL,
    etag       text   NOT NULL,
    created_at bigint NOT NULL,
    data       text   NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE INDEX group_bindings_group ON group_bindings (name);

ALTER TABLE tokens ADD COLUMN claim_groups text NOT NULL DEFAULT '[]';

-- +goose Down
ALTER TABLE tokens DROP COLUMN claim_groups;
DROP TABLE group_bindings;
