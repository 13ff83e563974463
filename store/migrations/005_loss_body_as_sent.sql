-- A loss notice's body is kept exactly as the SSP sent it: `json` stores the text itself (its
-- spelling of numbers, key order, duplicate keys, whitespace), where `jsonb` would rewrite it and
-- refuse what it cannot hold (a number beyond numeric's range, a \u0000 escape).
ALTER TABLE loss_notices ALTER COLUMN body TYPE json USING body::json;
