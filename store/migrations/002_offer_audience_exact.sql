-- The audience an OpenRTB bid was priced with, kept exactly: an SSP may send more than four
-- decimals (qty.multiplier 119.471234), and the price is computed from all of them, so the
-- record must not round it (NUMERIC(14, 4) did). Bids refuse audiences of 10 billion or more.
ALTER TABLE offers ALTER COLUMN audience TYPE numeric;
