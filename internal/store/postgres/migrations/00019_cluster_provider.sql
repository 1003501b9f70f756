-- A cluster's provider as a column, with its state: the periodic parts of
-- a backend (health, autoscaling, certificates, backups, profiles) list
-- only the Succeeded clusters of the providers they watch
-- (ListClustersWhere), not every cluster of the fleet. The index leads
-- with the provider: one leading with the state would draw the claim's
-- query (ClaimCluster) away from its partial index clusters_claim. Kept
-- column for column in step with the other store's migrations.

-- +goose Up
ALTER TABLE clusters ADD COLUMN provider text NOT NULL DEFAULT '';
UPDATE clusters SET provider = COALESCE(spec::jsonb ->> 'provider', '');
CREATE INDEX clusters_provider ON clusters (provider, provisioning_state, project, name);

-- +goose Down
DROP INDEX clusters_provider;
ALTER TABLE clusters DROP COLUMN provider;
