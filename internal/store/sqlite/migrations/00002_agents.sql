-- Agent-facing records: a cluster's secrets, instructions for node agents,
-- and the log lines agents send. All go with their cluster.

-- +goose Up
-- CA keys, the agent credential hash, the passphrase hash, the
-- service-account key. Never returned by the API.
CREATE TABLE cluster_secrets (
    project TEXT NOT NULL,
    cluster TEXT NOT NULL,
    name    TEXT NOT NULL,
    value   BLOB NOT NULL,
    PRIMARY KEY (project, cluster, name),
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

CREATE TABLE instructions (
    id         TEXT    NOT NULL PRIMARY KEY,
    project    TEXT    NOT NULL,
    cluster    TEXT    NOT NULL,
    node       TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    params     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    result     TEXT    NOT NULL DEFAULT '',
    result_at  INTEGER NOT NULL DEFAULT 0,
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

CREATE INDEX instructions_node ON instructions (project, cluster, node, id);

CREATE TABLE node_logs (
    id      INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    project TEXT    NOT NULL,
    cluster TEXT    NOT NULL,
    node    TEXT    NOT NULL,
    time    INTEGER NOT NULL,
    stream  TEXT    NOT NULL,
    line    TEXT    NOT NULL,
    FOREIGN KEY (project, cluster) REFERENCES clusters (project, name) ON DELETE CASCADE
);

CREATE INDEX node_logs_node ON node_logs (project, cluster, node, id);

-- +goose Down
DROP TABLE node_logs;
DROP TABLE instructions;
DROP TABLE cluster_secrets;
