-- +goose Up
-- The fleet: one row per `pooltop work` process, written by the process
-- itself when it starts and at every heartbeat, and marked stopped when it
-- drains. A process killed outright leaves its row as it was: last_seen
-- stops moving, and readers call it gone after a few heartbeats. Never on a
-- worker's hot path: one small upsert a second per process.
CREATE TABLE IF NOT EXISTS pooltop_worker (
    name        text PRIMARY KEY,
    host        text NOT NULL,
    pid         integer NOT NULL,
    run_id      text NOT NULL,          -- the suffix of the holder names of its workers
    workers     integer NOT NULL DEFAULT 0,
    cycles      bigint NOT NULL DEFAULT 0,
    committed   bigint NOT NULL DEFAULT 0,
    held        integer NOT NULL DEFAULT 0,
    heartbeat_s double precision NOT NULL DEFAULT 1,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    stopped_at  timestamptz
);

-- +goose Down
DROP TABLE IF EXISTS pooltop_worker;
