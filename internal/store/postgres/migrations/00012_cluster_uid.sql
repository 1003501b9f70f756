-- A cluster's identity: every cluster gets a uid (a UUIDv7) when it is
-- created, and its operations and events are filed under it instead of
-- under its name, so that a cluster created again under the name of a
-- deleted one starts with a history of its own. The tombstone of a deleted
-- cluster keeps its uid: until the name is used again, its history is the
-- name's. Kept column for column in step with ../../sqlite/migrations.
--
-- The rows already stored are split at the deletes: a name's history up to
-- and including each delete that Succeeded (which removed the cluster) is
-- one cluster's, and what came after is the next one's. An operation belongs
-- to the cluster of the deletes before it; an event to the cluster of the
-- last operation begun at or before it. Each cluster so found gets a uid;
-- the cluster that has the name now gets the uid of its part, a tombstone
-- the uid of the last deleted one. The uids made here carry the time of the
-- migration.

-- +goose Up
ALTER TABLE clusters ADD COLUMN uid text NOT NULL DEFAULT '';
ALTER TABLE lease_tombstones ADD COLUMN uid text NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN cluster_uid text NOT NULL DEFAULT '';
ALTER TABLE events ADD COLUMN cluster_uid text NOT NULL DEFAULT '';
-- Indexed again below, with cluster_uid: not kept up to date meanwhile.
DROP INDEX operations_cluster;
DROP INDEX events_cluster;

-- op_parts: each operation's part, how many of its name's deletes that
-- Succeeded came before it.
CREATE TEMP TABLE op_parts (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,
    project    text COLLATE "C" NOT NULL,
    cluster    text COLLATE "C" NOT NULL,
    start_time bigint  NOT NULL,
    part       integer NOT NULL
);
INSERT INTO op_parts (id, project, cluster, start_time, part)
SELECT id, project, cluster, start_time,
    COALESCE(sum(CASE WHEN kind = 'delete' AND status = 'Succeeded' THEN 1 ELSE 0 END) OVER (
        PARTITION BY project, cluster ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
FROM operations;

-- event_parts: each event's part, that of the last operation of its name
-- begun at or before it (a part only grows, so the largest so far), in
-- one pass over both in time order.
CREATE TEMP TABLE event_parts (
    id      bigint  NOT NULL PRIMARY KEY,
    project text COLLATE "C" NOT NULL,
    cluster text COLLATE "C" NOT NULL,
    part    integer NOT NULL
);
INSERT INTO event_parts (id, project, cluster, part)
SELECT id, project, cluster, part FROM (
    SELECT id, project, cluster, is_event, COALESCE(max(part) OVER (
        PARTITION BY project, cluster ORDER BY happened, is_event ROWS UNBOUNDED PRECEDING), 0) AS part
    FROM (SELECT id, project, cluster, time AS happened, 1 AS is_event, NULL AS part FROM events
        UNION ALL SELECT NULL, project, cluster, start_time, 0, part FROM op_parts) timeline
) parted WHERE is_event = 1;

-- parts: every part of every name, those of operations and events and
-- the part of each cluster that exists (after all of its name's deletes)
-- or was deleted last (its tombstone's), each given a uid.
CREATE TEMP TABLE parts (
    project text COLLATE "C" NOT NULL,
    cluster text COLLATE "C" NOT NULL,
    part    integer NOT NULL,
    uid     text    NOT NULL DEFAULT '',
    PRIMARY KEY (project, cluster, part)
);
INSERT INTO parts (project, cluster, part)
SELECT project, cluster, part FROM op_parts
UNION SELECT project, cluster, part FROM event_parts
UNION SELECT c.project, c.name, (SELECT count(*) FROM operations d WHERE d.project = c.project AND d.cluster = c.name
    AND d.kind = 'delete' AND d.status = 'Succeeded') FROM clusters c
UNION SELECT t.project, t.name, (SELECT count(*) FROM operations d WHERE d.project = t.project AND d.cluster = t.name
    AND d.kind = 'delete' AND d.status = 'Succeeded') - 1 FROM lease_tombstones t;
-- Temporary tables have no statistics until analyzed.
ANALYZE op_parts, event_parts, parts;

-- A UUIDv7: the time of the migration in milliseconds, then random bits.
UPDATE parts SET uid =
    substr(lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0'), 1, 8) || '-' ||
    substr(lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint), 12, '0'), 9, 4) || '-7' ||
    substr(gen_random_uuid()::text, 16, 3) || '-' || substr(gen_random_uuid()::text, 20, 17);

UPDATE clusters SET uid = (SELECT p.uid FROM parts p WHERE p.project = clusters.project AND p.cluster = clusters.name
    AND p.part = (SELECT count(*) FROM operations d WHERE d.project = clusters.project AND d.cluster = clusters.name
        AND d.kind = 'delete' AND d.status = 'Succeeded'));
UPDATE lease_tombstones SET uid = (SELECT p.uid FROM parts p WHERE p.project = lease_tombstones.project
    AND p.cluster = lease_tombstones.name
    AND p.part = (SELECT count(*) FROM operations d WHERE d.project = lease_tombstones.project
        AND d.cluster = lease_tombstones.name AND d.kind = 'delete' AND d.status = 'Succeeded') - 1);
UPDATE operations SET cluster_uid = p.uid FROM op_parts o JOIN parts p
    ON p.project = o.project AND p.cluster = o.cluster AND p.part = o.part WHERE o.id = operations.id;
UPDATE events SET cluster_uid = p.uid FROM event_parts x JOIN parts p
    ON p.project = x.project AND p.cluster = x.cluster AND p.part = x.part WHERE x.id = events.id;

DROP TABLE parts;
DROP TABLE event_parts;
DROP TABLE op_parts;

-- The lists of a cluster's operations and events (by its uid, in id order)
-- and the conflict's search for its running operation.
CREATE INDEX operations_cluster ON operations (project, cluster, cluster_uid, id);
CREATE INDEX events_cluster ON events (project, cluster, cluster_uid, id);

-- +goose Down
DROP INDEX events_cluster;
DROP INDEX operations_cluster;
CREATE INDEX operations_cluster ON operations (project, cluster, id);
CREATE INDEX events_cluster ON events (project, cluster, id);
ALTER TABLE events DROP COLUMN cluster_uid;
ALTER TABLE operations DROP COLUMN cluster_uid;
ALTER TABLE lease_tombstones DROP COLUMN uid;
ALTER TABLE clusters DROP COLUMN uid;
