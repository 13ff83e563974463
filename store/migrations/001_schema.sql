-- The whole domain of docs/contract.md#2-inventory, and the records the hot path writes through the
-- durable queue. Money is NUMERIC cents with micro-cent precision, never a float.

CREATE TABLE publishers (
    id                   uuid PRIMARY KEY,
    name                 text NOT NULL CHECK (length(trim(name)) > 0),
    commission_rate      numeric(7, 6) NOT NULL DEFAULT 0.15
                         CHECK (commission_rate >= 0 AND commission_rate <= 1),
    external_ids_enabled boolean NOT NULL DEFAULT false,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    key_id       uuid PRIMARY KEY,
    publisher_id uuid NOT NULL REFERENCES publishers (id) ON DELETE CASCADE,
    key_hash     bytea NOT NULL UNIQUE,
    key_prefix   text NOT NULL,
    environment  text NOT NULL CHECK (environment IN ('production', 'staging')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX api_keys_publisher ON api_keys (publisher_id);

CREATE TABLE advertisers (
    id         uuid PRIMARY KEY,
    name       text NOT NULL CHECK (length(trim(name)) > 0),
    domain     text NOT NULL CHECK (length(trim(domain)) > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE billing_codes (
    advertiser_id uuid NOT NULL REFERENCES advertisers (id) ON DELETE CASCADE,
    publisher_id  uuid NOT NULL REFERENCES publishers (id) ON DELETE CASCADE,
    code          text NOT NULL CHECK (length(trim(code)) > 0),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (advertiser_id, publisher_id)
);

CREATE TABLE screens (
    id                uuid PRIMARY KEY,
    publisher_id      uuid NOT NULL REFERENCES publishers (id),
    external_id       text CHECK (external_id IS NULL OR length(trim(external_id)) > 0),
    name              text NOT NULL,
    type              text NOT NULL CHECK (type IN ('static', 'slow', 'moving')),
    width             integer NOT NULL CHECK (width > 0),
    height            integer NOT NULL CHECK (height > 0),
    audience_per_play numeric(14, 4) NOT NULL DEFAULT 1.0 CHECK (audience_per_play > 0),
    venue_type        text,
    timezone          text NOT NULL DEFAULT 'UTC',
    lat               double precision CHECK (lat IS NULL OR lat BETWEEN -90 AND 90),
    lon               double precision CHECK (lon IS NULL OR lon BETWEEN -180 AND 180),
    active            boolean NOT NULL DEFAULT true,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    -- Deferred, so one import can swap two screens' external ids.
    UNIQUE (publisher_id, external_id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX screens_publisher ON screens (publisher_id, id);

CREATE TABLE campaigns (
    id                            uuid PRIMARY KEY,
    advertiser_id                 uuid NOT NULL REFERENCES advertisers (id),
    name                          text NOT NULL,
    status                        text NOT NULL CHECK (status IN ('active', 'paused')),
    cpm_cents                     numeric(20, 6) NOT NULL CHECK (cpm_cents > 0),
    budget_cents                  numeric(20, 6) NOT NULL CHECK (budget_cents >= 0),
    daily_budget_cents            numeric(20, 6) CHECK (daily_budget_cents >= 0),
    start_at                      timestamptz,
    end_at                        timestamptz,
    max_plays_per_screen_per_hour integer CHECK (max_plays_per_screen_per_hour > 0),
    targeting                     jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at                    timestamptz NOT NULL DEFAULT now(),
    CHECK (start_at IS NULL OR end_at IS NULL OR end_at > start_at)
);

CREATE TABLE creatives (
    id               uuid PRIMARY KEY,
    campaign_id      uuid NOT NULL REFERENCES campaigns (id) ON DELETE CASCADE,
    url              text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('image', 'cinemagraph', 'video')),
    width            integer NOT NULL CHECK (width > 0),
    height           integer NOT NULL CHECK (height > 0),
    duration_seconds integer NOT NULL CHECK (duration_seconds > 0),
    approved         boolean NOT NULL DEFAULT false,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX creatives_campaign ON creatives (campaign_id);

-- Bumped on every inventory change; workers compare it to decide when to reload.
CREATE TABLE inventory_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL
);
INSERT INTO inventory_version VALUES (true, 1);

-- Records. Written only by the queue consumer, idempotently (ON CONFLICT DO NOTHING).

CREATE TABLE offers (
    offer_id         uuid PRIMARY KEY,
    channel          text NOT NULL CHECK (channel IN ('core', 'openrtb')),
    status           text NOT NULL
                     CHECK (status IN ('open', 'accepted', 'rejected', 'expired', 'lost', 'billed')),
    publisher_id     uuid NOT NULL REFERENCES publishers (id),
    screen_id        uuid NOT NULL REFERENCES screens (id),
    campaign_id      uuid NOT NULL REFERENCES campaigns (id),
    creative_id      uuid NOT NULL REFERENCES creatives (id),
    bid_price_cents  numeric(20, 6) NOT NULL CHECK (bid_price_cents > 0),
    created_at       timestamptz NOT NULL,
    expires_at       timestamptz NOT NULL,
    resolved_at      timestamptz,
    rejection_reason text CHECK (length(rejection_reason) <= 500),
    -- OpenRTB only: the BidRequest id, impression id, PMP deal id and the audience used.
    auction_id       text,
    imp_id           text,
    pmp_deal_id      text,
    audience         numeric(14, 4)
);
CREATE INDEX offers_campaign ON offers (campaign_id);
CREATE INDEX offers_open_expiry ON offers (expires_at) WHERE status = 'open';

CREATE TABLE deals (
    deal_id           uuid PRIMARY KEY,
    offer_id          uuid NOT NULL UNIQUE REFERENCES offers (offer_id),
    publisher_id      uuid NOT NULL REFERENCES publishers (id),
    campaign_id       uuid NOT NULL REFERENCES campaigns (id),
    gross_price_cents numeric(20, 6) NOT NULL CHECK (gross_price_cents > 0),
    commission_cents  numeric(20, 6) NOT NULL CHECK (commission_cents >= 0),
    net_price_cents   numeric(20, 6) NOT NULL CHECK (net_price_cents >= 0),
    accepted_at       timestamptz NOT NULL,
    CHECK (net_price_cents + commission_cents = gross_price_cents)
);

CREATE TABLE billing_records (
    billing_id        uuid PRIMARY KEY,
    offer_id          uuid NOT NULL UNIQUE REFERENCES offers (offer_id),
    deal_id           uuid UNIQUE REFERENCES deals (deal_id),
    source            text NOT NULL CHECK (source IN ('core_accept', 'openrtb_impression')),
    publisher_id      uuid NOT NULL REFERENCES publishers (id),
    advertiser_id     uuid NOT NULL REFERENCES advertisers (id),
    campaign_id       uuid NOT NULL REFERENCES campaigns (id),
    billing_code      text,
    commission_rate   numeric(7, 6) NOT NULL,
    gross_price_cents numeric(20, 6) NOT NULL CHECK (gross_price_cents > 0),
    commission_cents  numeric(20, 6) NOT NULL CHECK (commission_cents >= 0),
    net_price_cents   numeric(20, 6) NOT NULL CHECK (net_price_cents >= 0),
    billed_at         timestamptz NOT NULL,
    CHECK (net_price_cents + commission_cents = gross_price_cents)
);
CREATE INDEX billing_campaign ON billing_records (campaign_id);

CREATE TABLE rejections (
    offer_id    uuid PRIMARY KEY REFERENCES offers (offer_id),
    reason      text CHECK (length(reason) <= 500),
    rejected_at timestamptz NOT NULL
);

CREATE TABLE playouts (
    playout_id        uuid PRIMARY KEY,
    deal_id           uuid NOT NULL UNIQUE REFERENCES deals (deal_id),
    played_at         timestamptz NOT NULL,
    confirmed_at      timestamptz NOT NULL,
    duration_seconds  integer CHECK (duration_seconds >= 0),
    completion_rate   numeric(6, 3) CHECK (completion_rate BETWEEN 0 AND 100),
    player_version    text,
    screen_resolution text
);

CREATE TABLE loss_notices (
    offer_id       uuid PRIMARY KEY REFERENCES offers (offer_id),
    reason         integer,
    price          numeric(20, 6),
    currency       text,
    min_to_win     numeric(20, 6),
    auction_id     text,
    body           jsonb,
    after_billing  boolean NOT NULL,
    released_cents numeric(20, 6) NOT NULL DEFAULT 0,
    received_at    timestamptz NOT NULL
);

CREATE TABLE tracking_events (
    event_id    uuid PRIMARY KEY,
    offer_id    uuid NOT NULL REFERENCES offers (offer_id),
    event       text NOT NULL,
    channel     text NOT NULL CHECK (channel IN ('core', 'openrtb')),
    event_ts    timestamptz,
    price       text,
    audience    text,
    billed      boolean NOT NULL DEFAULT false,
    received_at timestamptz NOT NULL
);
CREATE INDEX tracking_offer ON tracking_events (offer_id);
