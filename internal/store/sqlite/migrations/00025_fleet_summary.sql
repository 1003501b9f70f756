-- The fleet page (store.FleetSummary) adds up the fleet in grouped
-- queries, each served by an index read in its order (no sort, no row
-- read), as 10,000 clusters and 100,000 operations must be added up in
-- well under 300 ms:
--
-- - A cluster's Kubernetes version and profile as columns, written with
--   its spec (BeginOperation) like its provider: counted with its state and
--   provider from clusters_fleet, not parsed out of each spec's JSON. The
--   index leads with the version, not the state, so that the claim's query
--   keeps its partial index clusters_claim.
-- - Operations by status and kind, then duration: the counts by kind and
--   status walk it in group order, and a percentile of a kind's durations
--   is its n-th entry in duration order (LIMIT 1 OFFSET n); with the
--   cluster last, the autoscaler's busiest clusters are found in it too.
-- - The pool sizes an autoscale operation changed (a JSON array of
--   v1.PoolResize), written once when it is begun: the fleet page draws
--   each autoscaled pool's nodes over time from them.
--
-- Kept column for column in step with the other store's migrations.

-- +goose Up
ALTER TABLE clusters ADD COLUMN kubernetes_version TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN profile TEXT NOT NULL DEFAULT '';
ALTER TABLE operations ADD COLUMN pools TEXT NOT NULL DEFAULT '';
UPDATE clusters SET kubernetes_version = COALESCE(json_extract(spec, '$.kubernetesVersion'), ''), profile = COALESCE(json_extract(spec, '$.profile.name'), '');
CREATE INDEX clusters_fleet ON clusters (kubernetes_version, profile, provider, provisioning_state, project);
CREATE INDEX operations_kind ON operations (status, kind, (end_time - start_time), start_time, end_time, project, cluster);

-- +goose Down
DROP INDEX operations_kind;
DROP INDEX clusters_fleet;
ALTER TABLE operations DROP COLUMN pools;
ALTER TABLE clusters DROP COLUMN profile;
ALTER TABLE clusters DROP COLUMN kubernetes_version;
