-- Indexes the reports read through (docs/reports.md): a publisher's billing records and a
-- campaign's offers and billing records by time, plays confirmed and impressions by time.
-- The composite indexes on campaign_id serve every query the single-column ones
-- (billing_campaign, offers_campaign) serve; those stay until a contract step drops them, so
-- that this migration only adds (docs/operations.md, "Rolling upgrades").
CREATE INDEX billing_publisher_time ON billing_records (publisher_id, billed_at);
CREATE INDEX billing_campaign_time ON billing_records (campaign_id, billed_at);
CREATE INDEX offers_campaign_time ON offers (campaign_id, created_at);
CREATE INDEX playouts_confirmed ON playouts (confirmed_at);
CREATE INDEX tracking_impressions_time ON tracking_events (received_at) WHERE event = 'impression';
