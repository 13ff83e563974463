-- Each publisher's per-key request rate on the public routes (a token bucket): requests per
-- second and the bucket's size. NULL: the fleet default (RATE_LIMIT_PER_SECOND, off unless set).
-- Additive: code that does not know the columns reads and writes publishers as before.
ALTER TABLE publishers
    ADD COLUMN IF NOT EXISTS rate_limit_per_second double precision
        CHECK (rate_limit_per_second > 0),
    ADD COLUMN IF NOT EXISTS rate_limit_burst integer CHECK (rate_limit_burst >= 1);
