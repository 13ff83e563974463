-- Budget top-ups sent with an idempotency key (the admin API's `Idempotency-Key` header, the
-- CLI's `--idempotency-key`): a retry whose first attempt committed (its answer lost to a
-- timeout) finds its key here and adds nothing a second time. Kept for good: a key names one
-- top-up forever, so a late retry cannot add again either.
CREATE TABLE budget_top_ups (
    idempotency_key text PRIMARY KEY,
    campaign_id     uuid NOT NULL REFERENCES campaigns (id),
    add_cents       numeric NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
