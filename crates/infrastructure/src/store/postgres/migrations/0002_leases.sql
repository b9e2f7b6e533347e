-- Who holds a lease, and whether they are still there. Every store
-- instance keeps one session holding the advisory lock (awr's class, its
-- own key) whose key is its runs' `lease_presence`: when its process dies
-- the server ends the session and the lock goes with it, so its leases are
-- known dead at once instead of when they expire. A writer that is alive
-- but stuck (paused, cut off) keeps its session; its leases expire.

ALTER TABLE awr_runs ADD COLUMN lease_presence integer;

-- Whether the store instance whose presence key is `key` is still there.
-- The class is the bytes of `awrp`.
CREATE FUNCTION awr_present(key integer) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid = 1635218032::oid AND objid = key::oid
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
$$;

-- Whether a run's lease is held by a writer that is still there.
CREATE FUNCTION awr_leased(run awr_runs) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT run.lease_owner IS NOT NULL
       AND run.lease_expires_at > now()
       AND awr_present(run.lease_presence)
$$;
