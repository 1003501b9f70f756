-- Identities, API tokens and the audit log. Kept column for column in step
-- with ../../postgres/migrations.

-- +goose Up
CREATE TABLE users (
    name       TEXT    NOT NULL PRIMARY KEY,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL
);

-- A user's role in a project. Deleting the user deletes its memberships
-- (sqlstore does it in the same transaction).
CREATE TABLE members (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, name)
);

CREATE INDEX members_user ON members (name);

CREATE TABLE service_accounts (
    project    TEXT    NOT NULL REFERENCES projects (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    etag       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    data       TEXT    NOT NULL,
    PRIMARY KEY (project, name)
);

-- API tokens: only the SHA-256 of a token's value is kept.
CREATE TABLE tokens (
    id           TEXT    NOT NULL PRIMARY KEY,
    hash         TEXT    NOT NULL UNIQUE,
    principal    TEXT    NOT NULL,
    description  TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL DEFAULT 0,
    revoked_at   INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX tokens_principal ON tokens (principal, id);

CREATE TABLE audit (
    id      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    time    INTEGER NOT NULL,
    actor   TEXT    NOT NULL,
    action  TEXT    NOT NULL,
    project TEXT    NOT NULL,
    result  TEXT    NOT NULL,
    data    TEXT    NOT NULL
);

CREATE INDEX audit_project ON audit (project, id);

-- +goose Down
DROP TABLE audit;
DROP TABLE tokens;
DROP TABLE service_accounts;
DROP TABLE members;
DROP TABLE users;
