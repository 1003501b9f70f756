-- Events cost less to write (a fleet's creates write 29 a cluster, each
-- in the transaction of its step's checkpoint):
--
-- - Their ids come from the table's largest id plus one (a plain INTEGER
--   PRIMARY KEY), not from AUTOINCREMENT, which read and wrote
--   sqlite_sequence at every insert. Ids still never go back: an id is only
--   reused after the largest is deleted, and Prune always keeps the newest
--   event.
-- - No index on their time: Prune takes the oldest events in id order (ids
--   grow with time), so events_time served nothing else.
--
-- SQLite cannot drop AUTOINCREMENT from a table: the table is built again.
-- Kept in step with ../../postgres/migrations.

-- +goose Up
CREATE TABLE events_new (
    id          INTEGER NOT NULL PRIMARY KEY,
    project     TEXT    NOT NULL,
    cluster     TEXT    NOT NULL,
    time        INTEGER NOT NULL,
    data        TEXT    NOT NULL,
    cluster_uid TEXT    NOT NULL DEFAULT ''
);
INSERT INTO events_new (id, project, cluster, time, data, cluster_uid)
    SELECT id, project, cluster, time, data, cluster_uid FROM events;
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_cluster ON events (project, cluster, cluster_uid, id);
DELETE FROM sqlite_sequence WHERE name = 'events';

-- +goose Down
CREATE TABLE events_old (
    id          INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    project     TEXT    NOT NULL,
    cluster     TEXT    NOT NULL,
    time        INTEGER NOT NULL,
    data        TEXT    NOT NULL,
    cluster_uid TEXT    NOT NULL DEFAULT ''
);
INSERT INTO events_old (id, project, cluster, time, data, cluster_uid)
    SELECT id, project, cluster, time, data, cluster_uid FROM events;
DROP TABLE events;
ALTER TABLE events_old RENAME TO events;
CREATE INDEX events_cluster ON events (project, cluster, cluster_uid, id);
CREATE INDEX events_time ON events (time);
