-- Exchange rates an operator loads (part of the inventory document), so that an OpenRTB floor in
-- another currency is converted to EUR: units of `currency` one euro buys on `as_of`. A rate
-- older than EXCHANGE_RATE_MAX_AGE_DAYS is not used.
CREATE TABLE exchange_rates (
    currency      text PRIMARY KEY CHECK (currency ~ '^[A-Z]{3}$' AND currency <> 'EUR'),
    units_per_eur numeric(20, 10) NOT NULL CHECK (units_per_eur > 0),
    as_of         date NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
