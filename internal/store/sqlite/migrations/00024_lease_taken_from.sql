-- Who a claim took a cluster's lease from: the claim copies the old owner
-- before it writes its own, so a lease taken over after its holder died
-- (or stopped renewing) is told apart from a free one, for the worker's
-- kiln_worker_lease_takeovers_total. A released lease has no owner, so
-- the copy is empty then. Kept column for column in step with the other
-- store's migrations.

-- +goose Up
ALTER TABLE clusters ADD COLUMN lease_taken_from TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE clusters DROP COLUMN lease_taken_from;
