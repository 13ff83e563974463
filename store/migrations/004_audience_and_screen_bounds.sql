-- Bounds an operator sets per publisher and per campaign, so no single play can drain a
-- budget (docs/decisions.md, "Bounds on audience, price per play and sizes").
-- A publisher's largest audience per play (of its screens, and of an OpenRTB audience bid on
-- for them) and how many screens the screens API lets it hold. Publishers stored before this
-- get bounds their stored screens already fit, so nothing that serves today is refused.
ALTER TABLE publishers
    ADD COLUMN max_audience_per_play numeric(14, 4) NOT NULL DEFAULT 50000
        CHECK (max_audience_per_play > 0),
    ADD COLUMN max_screens integer NOT NULL DEFAULT 10000 CHECK (max_screens >= 0);
UPDATE publishers p
   SET max_audience_per_play = greatest(p.max_audience_per_play, s.largest),
       max_screens = greatest(p.max_screens, s.screens)
  FROM (SELECT publisher_id, max(audience_per_play) AS largest, count(*) AS screens
          FROM screens GROUP BY publisher_id) s
 WHERE s.publisher_id = p.id;
-- The most one play of a campaign may cost, in cents; null: no cap.
ALTER TABLE campaigns
    ADD COLUMN max_price_per_play_cents numeric(20, 6) CHECK (max_price_per_play_cents > 0);
