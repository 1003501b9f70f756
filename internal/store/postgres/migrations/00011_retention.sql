-- Retention (store.Prune): events and audit entries are deleted by age,
-- tokens some time after they expired or were revoked. The indexes let a
-- prune find them without reading every row. Kept in step with the other
-- database's migrations.

-- +goose Up
CREATE INDEX events_time ON events (time);
CREATE INDEX audit_time ON audit (time);
CREATE INDEX tokens_expires ON tokens (expires_at);
CREATE INDEX tokens_revoked ON tokens (revoked_at) WHERE revoked_at <> 0;

-- +goose Down
DROP INDEX tokens_revoked;
DROP INDEX tokens_expires;
DROP INDEX audit_time;
DROP INDEX events_time;
