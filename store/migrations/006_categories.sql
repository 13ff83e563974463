-- IAB content categories of advertisers and campaigns (OpenRTB `bcat` blocks by them; a bid
-- carries them as `cat`), in the taxonomy `cattax` names (AdCOM's numbering, 1: Content Category
-- Taxonomy 1.0). A campaign's null categories are its advertiser's.
ALTER TABLE advertisers
    ADD COLUMN categories text[],
    ADD COLUMN cattax integer NOT NULL DEFAULT 1 CHECK (cattax > 0);
ALTER TABLE campaigns
    ADD COLUMN categories text[],
    ADD COLUMN cattax integer NOT NULL DEFAULT 1 CHECK (cattax > 0);
