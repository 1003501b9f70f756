-- Why Kiln began an operation by itself (an autoscale decision) and the
-- nodes a scale-down removes (a JSON array), both written once when the
-- operation is begun. Kept column for column in step with the other
-- store's migrations.

-- +goose Up
ALTER TABLE operations ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN nodes TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE operations DROP COLUMN nodes;
ALTER TABLE operations DROP COLUMN reason;
