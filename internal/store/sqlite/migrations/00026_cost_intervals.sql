-- The record of what each cluster's estimate (status.cost) said over time,
-- for the cost page's last 30 days (store.CostRecord): an interval per
-- estimate in force, written by FinishOperation in the transaction that
-- ends an operation when the estimate changes (end_time 0: still in
-- force), and ended when the cluster's delete finishes. Filed under the
-- cluster's uid with its project and name as they were, with no foreign
-- key: it outlives the cluster (and its project) until retention prunes
-- it, found by its end (cost_intervals_ended). The window's query reads
-- cost_intervals_window: what ends after the window begins, by project.
-- per_hour is the estimate's (status.cost.perHour), complete 1 or 0.
-- Kept column for column in step with the other store's migrations.

-- +goose Up
CREATE TABLE cost_intervals (
    cluster_uid TEXT    NOT NULL,
    start_time  INTEGER NOT NULL,
    end_time    INTEGER NOT NULL DEFAULT 0,
    project     TEXT    NOT NULL,
    cluster     TEXT    NOT NULL,
    provider    TEXT    NOT NULL,
    region      TEXT    NOT NULL,
    basis       TEXT    NOT NULL,
    per_hour    REAL    NOT NULL,
    complete    INTEGER NOT NULL,
    PRIMARY KEY (cluster_uid, start_time)
);

CREATE INDEX cost_intervals_ended ON cost_intervals (end_time);
CREATE INDEX cost_intervals_window ON cost_intervals (project, end_time, start_time);

-- +goose Down
DROP TABLE cost_intervals;
