-- The backup a backup operation takes, or a restore operation puts back,
-- written once when the operation is begun. Kept column for column in step
-- with the other store's migrations.

-- +goose Up
ALTER TABLE operations ADD COLUMN backup TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE operations DROP COLUMN backup;
