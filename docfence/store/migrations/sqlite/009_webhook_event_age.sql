-- 009_webhook_event_age: outbox events are pruned oldest first once every delivery of theirs finished
-- (lockstep with postgres/009_webhook_event_age.sql); this index lets a pruning pass find them
-- without reading the whole outbox.
CREATE INDEX webhook_events_created_idx ON webhook_events (created_at);
