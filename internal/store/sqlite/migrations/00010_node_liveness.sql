-- Node liveness: a node's state and last heartbeat as columns of their own,
-- so the liveness sweep reads only the nodes whose heartbeat is old
-- (ListStaleNodes) instead of every node of every cluster. Kept column for
-- column in step with ../../postgres/migrations. Written by every PutNode
-- from the document; filled here from the documents already stored.

-- +goose Up
ALTER TABLE nodes ADD COLUMN state TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN heartbeat_at INTEGER;
UPDATE nodes SET
    state = COALESCE(json_extract(data, '$.state'), ''),
    heartbeat_at = CAST(ROUND((julianday(json_extract(data, '$.lastHeartbeat')) - 2440587.5) * 86400000) AS INTEGER) * 1000000;
CREATE INDEX nodes_heartbeat ON nodes (heartbeat_at) WHERE heartbeat_at IS NOT NULL;

-- +goose Down
DROP INDEX nodes_heartbeat;
ALTER TABLE nodes DROP COLUMN heartbeat_at;
ALTER TABLE nodes DROP COLUMN state;
