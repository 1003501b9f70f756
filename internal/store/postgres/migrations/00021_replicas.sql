-- The backend replicas that share the store, each alive until its record's
-- expiry, renewed on a heartbeat (PutReplica): the backend's periodic
-- checks divide the clusters among the live ones (internal/backend/shard).
-- Kept column for column in step with the other store's migrations.

-- +goose Up
CREATE TABLE replicas (
	name TEXT PRIMARY KEY,
	expires_at BIGINT NOT NULL
);

-- +goose Down
DROP TABLE replicas;
