-- Node liveness: a node's state and last heartbeat as columns of their own,
-- so the liveness sweep reads only the nodes whose heartbeat is old
-- (ListStaleNodes) instead of every node of every cluster. Kept column for
-- column in step with ../../sqlite/migrations. Written by every PutNode
-- from the document; filled here from the documents already stored.

-- +goose Up
ALTER TABLE nodes ADD COLUMN state text NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN heartbeat_at bigint;
UPDATE nodes SET
    state = COALESCE(data::jsonb->>'state', ''),
    heartbeat_at = (EXTRACT(EPOCH FROM (data::jsonb->>'lastHeartbeat')::timestamptz) * 1000000000)::bigint;
CREATE INDEX nodes_heartbeat ON nodes (heartbeat_at) WHERE heartbeat_at IS NOT NULL;

-- +goose Down
DROP INDEX nodes_heartbeat;
ALTER TABLE nodes DROP COLUMN heartbeat_at;
ALTER TABLE nodes DROP COLUMN state;
