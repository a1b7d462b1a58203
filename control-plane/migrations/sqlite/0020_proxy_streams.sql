-- Read-your-writes for enforcement: the proxies connected right now and the state
-- version each has applied. A replica inserts a row when a proxy opens its state stream
-- and deletes it when the stream ends; while the stream lasts it renews the row's lease
-- (wall-clock milliseconds), so the rows of a replica that died stop counting when their
-- lease runs out. A proxy's acknowledgement (sent to any replica) raises `acked_version`.
-- A write that changes what the proxies enforce waits, bounded, until every row with a
-- live lease has acknowledged its version.
CREATE TABLE proxy_streams (
    stream_id     TEXT PRIMARY KEY,
    proxy_id      TEXT NOT NULL,
    replica_id    TEXT NOT NULL,
    acked_version BIGINT NOT NULL,
    connected_at  BIGINT NOT NULL,
    lease_until   BIGINT NOT NULL
);
CREATE INDEX proxy_streams_proxy ON proxy_streams (proxy_id);
CREATE INDEX proxy_streams_replica ON proxy_streams (replica_id);
