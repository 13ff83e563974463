-- Report rollups (docs/reports.md, "How reports are computed"; docs/decisions.md, "Report
-- rollups kept by the database"): the sums the reports need per 15-minute UTC bucket, kept
-- exact by statement triggers on the record tables, so every writer that inserts a record
-- (this release's record writer, the previous release's during a rolling upgrade, the demo
-- history, a bulk load) moves the rollups in the same transaction. A trigger sees only the
-- rows its statement actually inserted (ON CONFLICT DO NOTHING leaves a replayed record out
-- of the transition table), so a replay adds nothing. Sums are NUMERIC without a typmod:
-- never a float, never rounded, never overflowing.
--
-- Each rollup table is written by one source table's trigger only, keys sorted, so two
-- writers' transactions take the rollup rows' locks in one order and cannot deadlock.
--
-- Each key carries its sums in the index (INCLUDE): rows arrive bucket by bucket, so one
-- publisher's or campaign's rows lie on as many heap pages as it has buckets, and a report
-- reads them from the index alone (an index-only scan over a few dozen pages per month).

-- The 15-minute UTC bucket holding `t`. Every UTC offset in use since 2000 is a multiple of
-- 15 minutes, so a local midnight or hour starts on a bucket boundary wherever the zone's
-- changes fall on one too (store/reports.py checks each report's zone and period).
CREATE FUNCTION report_bucket(t timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT date_bin('15 minutes', t, timestamptz '2000-01-01 00:00:00+00') $$;

-- A publisher's billing records by billing time.
CREATE TABLE earnings_rollup (
    publisher_id      uuid NOT NULL,
    bucket            timestamptz NOT NULL,
    plays             bigint NOT NULL,
    audience          numeric NOT NULL,
    gross_price_cents numeric NOT NULL,
    commission_cents  numeric NOT NULL,
    net_price_cents   numeric NOT NULL,
    PRIMARY KEY (publisher_id, bucket)
        INCLUDE (plays, audience, gross_price_cents, commission_cents, net_price_cents)
);

-- A campaign's billing records by billing time.
CREATE TABLE campaign_billing_rollup (
    campaign_id uuid NOT NULL,
    bucket      timestamptz NOT NULL,
    billed      bigint NOT NULL,
    audience    numeric NOT NULL,
    spend_cents numeric NOT NULL,
    PRIMARY KEY (campaign_id, bucket) INCLUDE (billed, audience, spend_cents)
);

-- A campaign's offers by creation time, by outcome (`offers` counts open ones too).
CREATE TABLE campaign_offers_rollup (
    campaign_id uuid NOT NULL,
    bucket      timestamptz NOT NULL,
    offers      bigint NOT NULL,
    accepted    bigint NOT NULL,
    rejected    bigint NOT NULL,
    expired     bigint NOT NULL,
    lost        bigint NOT NULL,
    PRIMARY KEY (campaign_id, bucket) INCLUDE (offers, accepted, rejected, expired, lost)
);

-- A campaign's rejected offers by creation time and reason ('' for none).
CREATE TABLE campaign_reasons_rollup (
    campaign_id uuid NOT NULL,
    bucket      timestamptz NOT NULL,
    reason      text NOT NULL,
    rejected    bigint NOT NULL,
    PRIMARY KEY (campaign_id, bucket, reason) INCLUDE (rejected)
);

-- A campaign's playouts by confirmation time.
CREATE TABLE campaign_playouts_rollup (
    campaign_id     uuid NOT NULL,
    bucket          timestamptz NOT NULL,
    plays_confirmed bigint NOT NULL,
    PRIMARY KEY (campaign_id, bucket) INCLUDE (plays_confirmed)
);

-- A campaign's impression events by time received. An offer counts once, with the event that
-- reached `impression_offers` first (`impressions`); its other impression events count as
-- `repeats`. A report counts offers with an impression in its period: the rollup answers that
-- exactly when its period holds no repeat, else the report reads the events.
CREATE TABLE campaign_impressions_rollup (
    campaign_id uuid NOT NULL,
    bucket      timestamptz NOT NULL,
    impressions bigint NOT NULL,
    repeats     bigint NOT NULL,
    PRIMARY KEY (campaign_id, bucket) INCLUDE (impressions, repeats)
);

-- The impression event each impressed offer is counted with.
CREATE TABLE impression_offers (
    offer_id uuid PRIMARY KEY,
    event_id uuid NOT NULL
);

-- The audience of an offer is kept on it when it is recorded: the one it was bid with
-- (OpenRTB), else its screen's audience per play at that time (Core). A report's audience
-- then no longer moves when a screen's audience changes later, and a rollup can hold it.
CREATE FUNCTION offer_audience() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    SELECT s.audience_per_play INTO NEW.audience FROM screens s WHERE s.id = NEW.screen_id;
    RETURN NEW;
END
$$;

-- What a set of billing records adds to the rollups: `sign` 1 for rows inserted.
CREATE FUNCTION rollup_billing() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO earnings_rollup AS r
        (publisher_id, bucket, plays, audience, gross_price_cents, commission_cents,
         net_price_cents)
    SELECT b.publisher_id, report_bucket(b.billed_at), count(*),
           COALESCE(sum(COALESCE(o.audience, s.audience_per_play)), 0),
           sum(b.gross_price_cents), sum(b.commission_cents), sum(b.net_price_cents)
      FROM changed b
      JOIN offers o ON o.offer_id = b.offer_id
      JOIN screens s ON s.id = o.screen_id
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (publisher_id, bucket) DO UPDATE SET
        plays = r.plays + EXCLUDED.plays,
        audience = r.audience + EXCLUDED.audience,
        gross_price_cents = r.gross_price_cents + EXCLUDED.gross_price_cents,
        commission_cents = r.commission_cents + EXCLUDED.commission_cents,
        net_price_cents = r.net_price_cents + EXCLUDED.net_price_cents;
    INSERT INTO campaign_billing_rollup AS r (campaign_id, bucket, billed, audience, spend_cents)
    SELECT b.campaign_id, report_bucket(b.billed_at), count(*),
           COALESCE(sum(COALESCE(o.audience, s.audience_per_play)), 0),
           sum(b.gross_price_cents)
      FROM changed b
      JOIN offers o ON o.offer_id = b.offer_id
      JOIN screens s ON s.id = o.screen_id
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (campaign_id, bucket) DO UPDATE SET
        billed = r.billed + EXCLUDED.billed,
        audience = r.audience + EXCLUDED.audience,
        spend_cents = r.spend_cents + EXCLUDED.spend_cents;
    RETURN NULL;
END
$$;

-- What offers add to the rollups: a row inserted counts once; an update (an open offer's
-- outcome arriving) takes the row's old contribution away and adds its new one.
CREATE FUNCTION rollup_offers() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO campaign_offers_rollup AS r
            (campaign_id, bucket, offers, accepted, rejected, expired, lost)
        SELECT o.campaign_id, report_bucket(o.created_at), sum(o.sign),
               COALESCE(sum(o.sign) FILTER (WHERE o.status IN ('accepted', 'billed')), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'rejected'), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'expired'), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'lost'), 0)
          FROM (SELECT 1 AS sign, * FROM changed) o
         GROUP BY 1, 2
         ORDER BY 1, 2
        ON CONFLICT (campaign_id, bucket) DO UPDATE SET
            offers = r.offers + EXCLUDED.offers,
            accepted = r.accepted + EXCLUDED.accepted,
            rejected = r.rejected + EXCLUDED.rejected,
            expired = r.expired + EXCLUDED.expired,
            lost = r.lost + EXCLUDED.lost;
        INSERT INTO campaign_reasons_rollup AS r (campaign_id, bucket, reason, rejected)
        SELECT o.campaign_id, report_bucket(o.created_at), COALESCE(o.rejection_reason, ''),
               sum(o.sign)
          FROM (SELECT 1 AS sign, * FROM changed) o
         WHERE o.status = 'rejected'
         GROUP BY 1, 2, 3
        HAVING sum(o.sign) <> 0
         ORDER BY 1, 2, 3
        ON CONFLICT (campaign_id, bucket, reason) DO UPDATE SET
            rejected = r.rejected + EXCLUDED.rejected;
    ELSE
        INSERT INTO campaign_offers_rollup AS r
            (campaign_id, bucket, offers, accepted, rejected, expired, lost)
        SELECT o.campaign_id, report_bucket(o.created_at), sum(o.sign),
               COALESCE(sum(o.sign) FILTER (WHERE o.status IN ('accepted', 'billed')), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'rejected'), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'expired'), 0),
               COALESCE(sum(o.sign) FILTER (WHERE o.status = 'lost'), 0)
          FROM (SELECT -1 AS sign, * FROM old_rows UNION ALL SELECT 1 AS sign, * FROM new_rows) o
         GROUP BY 1, 2
         ORDER BY 1, 2
        ON CONFLICT (campaign_id, bucket) DO UPDATE SET
            offers = r.offers + EXCLUDED.offers,
            accepted = r.accepted + EXCLUDED.accepted,
            rejected = r.rejected + EXCLUDED.rejected,
            expired = r.expired + EXCLUDED.expired,
            lost = r.lost + EXCLUDED.lost;
        INSERT INTO campaign_reasons_rollup AS r (campaign_id, bucket, reason, rejected)
        SELECT o.campaign_id, report_bucket(o.created_at), COALESCE(o.rejection_reason, ''),
               sum(o.sign)
          FROM (SELECT -1 AS sign, * FROM old_rows UNION ALL SELECT 1 AS sign, * FROM new_rows) o
         WHERE o.status = 'rejected'
         GROUP BY 1, 2, 3
        HAVING sum(o.sign) <> 0
         ORDER BY 1, 2, 3
        ON CONFLICT (campaign_id, bucket, reason) DO UPDATE SET
            rejected = r.rejected + EXCLUDED.rejected;
    END IF;
    RETURN NULL;
END
$$;

-- What playouts add: plays confirmed, by the campaign of their deal.
CREATE FUNCTION rollup_playouts() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO campaign_playouts_rollup AS r (campaign_id, bucket, plays_confirmed)
    SELECT d.campaign_id, report_bucket(p.confirmed_at), count(*)
      FROM changed p
      JOIN deals d ON d.deal_id = p.deal_id
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (campaign_id, bucket) DO UPDATE SET
        plays_confirmed = r.plays_confirmed + EXCLUDED.plays_confirmed;
    RETURN NULL;
END
$$;

-- What impression events add: the first of an offer's (the one `impression_offers` takes; a
-- concurrent writer's insert of the same offer waits for this one and then takes nothing)
-- counts as an impression, any other as a repeat.
CREATE FUNCTION rollup_impressions() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH events AS (
        SELECT t.event_id, t.offer_id, t.received_at FROM changed t WHERE t.event = 'impression'
    ), counted AS (
        INSERT INTO impression_offers (offer_id, event_id)
        SELECT DISTINCT ON (e.offer_id) e.offer_id, e.event_id
          FROM events e
         ORDER BY e.offer_id, e.received_at, e.event_id
        ON CONFLICT (offer_id) DO NOTHING
        RETURNING event_id
    )
    INSERT INTO campaign_impressions_rollup AS r (campaign_id, bucket, impressions, repeats)
    SELECT o.campaign_id, report_bucket(e.received_at), count(c.event_id),
           count(*) - count(c.event_id)
      FROM events e
      JOIN offers o ON o.offer_id = e.offer_id
      LEFT JOIN counted c ON c.event_id = e.event_id
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (campaign_id, bucket) DO UPDATE SET
        impressions = r.impressions + EXCLUDED.impressions,
        repeats = r.repeats + EXCLUDED.repeats;
    RETURN NULL;
END
$$;

-- The rollups of the records already stored, computed as the triggers would have: the
-- migration fills the empty tables with them, and a bulk load that bypasses the triggers
-- (bench/reports_bench.py) runs the same statements after it.
CREATE FUNCTION earnings_rollup_rows()
    RETURNS SETOF earnings_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT b.publisher_id, report_bucket(b.billed_at), count(*),
           COALESCE(sum(COALESCE(o.audience, s.audience_per_play)), 0),
           sum(b.gross_price_cents), sum(b.commission_cents), sum(b.net_price_cents)
      FROM billing_records b
      JOIN offers o ON o.offer_id = b.offer_id
      JOIN screens s ON s.id = o.screen_id
     GROUP BY 1, 2
$$;

CREATE FUNCTION campaign_billing_rollup_rows()
    RETURNS SETOF campaign_billing_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT b.campaign_id, report_bucket(b.billed_at), count(*),
           COALESCE(sum(COALESCE(o.audience, s.audience_per_play)), 0),
           sum(b.gross_price_cents)
      FROM billing_records b
      JOIN offers o ON o.offer_id = b.offer_id
      JOIN screens s ON s.id = o.screen_id
     GROUP BY 1, 2
$$;

CREATE FUNCTION campaign_offers_rollup_rows()
    RETURNS SETOF campaign_offers_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT o.campaign_id, report_bucket(o.created_at), count(*),
           count(*) FILTER (WHERE o.status IN ('accepted', 'billed')),
           count(*) FILTER (WHERE o.status = 'rejected'),
           count(*) FILTER (WHERE o.status = 'expired'),
           count(*) FILTER (WHERE o.status = 'lost')
      FROM offers o
     GROUP BY 1, 2
$$;

CREATE FUNCTION campaign_reasons_rollup_rows()
    RETURNS SETOF campaign_reasons_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT o.campaign_id, report_bucket(o.created_at), COALESCE(o.rejection_reason, ''), count(*)
      FROM offers o
     WHERE o.status = 'rejected'
     GROUP BY 1, 2, 3
$$;

CREATE FUNCTION campaign_playouts_rollup_rows()
    RETURNS SETOF campaign_playouts_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT d.campaign_id, report_bucket(p.confirmed_at), count(*)
      FROM playouts p
      JOIN deals d ON d.deal_id = p.deal_id
     GROUP BY 1, 2
$$;

-- Of each impressed offer, its earliest impression event is the one counted.
CREATE FUNCTION impression_offers_rows()
    RETURNS SETOF impression_offers
    LANGUAGE sql STABLE
    AS $$
    SELECT DISTINCT ON (t.offer_id) t.offer_id, t.event_id
      FROM tracking_events t
     WHERE t.event = 'impression'
     ORDER BY t.offer_id, t.received_at, t.event_id
$$;

-- Run after impression_offers is filled.
CREATE FUNCTION campaign_impressions_rollup_rows()
    RETURNS SETOF campaign_impressions_rollup
    LANGUAGE sql STABLE
    AS $$
    SELECT o.campaign_id, report_bucket(t.received_at), count(i.event_id),
           count(*) - count(i.event_id)
      FROM tracking_events t
      JOIN offers o ON o.offer_id = t.offer_id
      LEFT JOIN impression_offers i ON i.event_id = t.event_id
     WHERE t.event = 'impression'
     GROUP BY 1, 2
$$;

-- The triggers, in the order the record writer takes the tables' locks (offers first), so
-- that this migration waits for the writers' open transactions and then holds them off
-- until it commits: no record is written between the backfill below and the triggers.
CREATE TRIGGER offers_audience BEFORE INSERT ON offers
    FOR EACH ROW WHEN (NEW.audience IS NULL) EXECUTE FUNCTION offer_audience();
-- Core offers recorded before: the screen's audience per play now, which is what the
-- reports have counted for them so far.
UPDATE offers o SET audience = s.audience_per_play
  FROM screens s
 WHERE s.id = o.screen_id AND o.audience IS NULL;
CREATE TRIGGER offers_rollup_insert AFTER INSERT ON offers
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rollup_offers();
CREATE TRIGGER offers_rollup_update AFTER UPDATE ON offers
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION rollup_offers();
CREATE TRIGGER billing_rollup AFTER INSERT ON billing_records
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rollup_billing();
CREATE TRIGGER playouts_rollup AFTER INSERT ON playouts
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rollup_playouts();
CREATE TRIGGER impressions_rollup AFTER INSERT ON tracking_events
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION rollup_impressions();

INSERT INTO earnings_rollup SELECT * FROM earnings_rollup_rows();
INSERT INTO campaign_billing_rollup SELECT * FROM campaign_billing_rollup_rows();
INSERT INTO campaign_offers_rollup SELECT * FROM campaign_offers_rollup_rows();
INSERT INTO campaign_reasons_rollup SELECT * FROM campaign_reasons_rollup_rows();
INSERT INTO campaign_playouts_rollup SELECT * FROM campaign_playouts_rollup_rows();
INSERT INTO impression_offers SELECT * FROM impression_offers_rows();
INSERT INTO campaign_impressions_rollup SELECT * FROM campaign_impressions_rollup_rows();
