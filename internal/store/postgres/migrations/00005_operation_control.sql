-- Cancel, retry and forced delete of operations. Kept column for column in
-- step with ../../sqlite/migrations.
--
-- retry_of and forced are written when the operation is begun; leftovers by
-- the lease holder with the operation's progress; the cancel request only by
-- RequestCancel (the API, unfenced), which no other write touches.

-- +goose Up
ALTER TABLE operations ADD COLUMN retry_of text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN forced bigint NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN leftovers text NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN cancel_requested_at bigint NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN cancel_requested_by text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE operations DROP COLUMN cancel_requested_by;
ALTER TABLE operations DROP COLUMN cancel_requested_at;
ALTER TABLE operations DROP COLUMN leftovers;
ALTER TABLE operations DROP COLUMN forced;
ALTER TABLE operations DROP COLUMN retry_of;
