-- Shared helpers: each script is prefixed with those it uses, and those they use, at load time
-- (store/hot/scripts.py): a helper calls only helpers defined above it.
-- Amounts are integer micro-cents. Budget fields of a campaign live in the shard's hash:
--   <cid>:t total, <cid>:r reserved, <cid>:s spent; per UTC day <cid>:s in day hashes, the
--   spending of the offers made that day. A daily limit covers that day's spending and every
--   open reservation (<cid>:r): an offer lives at most OFFER_TTL_SECONDS and the sweeper's
--   lag, so past midnight the last ones of yesterday count too for that long, which is
--   stricter and never looser than counting today's reservations alone. Day hashes also hold
--   <cid>:r, today's reservations, for the daily check of earlier releases' workers
--   (COUNT_DAY_RESERVATIONS; an offer whose reservation left it out has `day_counted` '0');
--   nothing here reads it.
-- A campaign whose budget is split into slices (BUDGET_SLICES, docs/architecture.md "Budget
-- slices") has <cid>:t and <cid>:g (granted to its other slices) on its home shard only, and
-- <cid>:a (the allowance granted to it) on each other slice's shard; every slice has its own
-- :r and :s. What a slice may hold reserved and spent: t - g on the home, a on another slice;
-- of a daily limit, today: limit - dg on the home, da on another slice (day hash fields).

-- A decimal string becomes a number by arithmetic (`s + 0`) on the hot path, not by
-- `tonumber(s)`: Lua 5.1's tonumber is a C call that parses the string twice (once to check
-- it, once to convert it), arithmetic parses it once. Each string converted so is one the
-- caller or Redis wrote as a number (an argument, a budget field, TIME, an offer's field).
local function num(v)
  if v == false or v == nil then return 0 end
  return v + 0
end

-- True when this script runs after `deadline` (epoch ms from the caller's clock; 0: none). The
-- caller stops waiting for the reply then and answers "unavailable, retry", so a script that
-- arrives late (Redis stalled, a backlog) must change nothing: that answer has to be true.
local function too_late(deadline)
  deadline = deadline + 0
  if deadline <= 0 then return false end
  local t = redis.call('TIME')
  -- Redis' clock in whole ms is past the deadline when its unrounded ms reach deadline + 1.
  return t[1] * 1000 + t[2] / 1000 >= deadline + 1
end

-- Redis' clock in epoch ms.
local function now_ms()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function hash_to_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

-- An offer hash holds `status`, `campaign`, `price` (and what changes later: `freq_hour`,
-- `resolved_ms`, `deal_id`, `accepted_price`, `loss_count`) as fields, and every other field of
-- the offer packed into one JSON object, `rest`: a few fields to write instead of a dozen or
-- more. A hash without `rest` has every field on its own (written so by OFFER_HASH=fields);
-- both read the same; a field of its own wins over a packed one of the same name.
-- A lean offer (OFFER_HASH=lean) packs the same fields under `body` instead: its reservation
-- gave the hash no expiry, and the name tells its outcome to set the retention's (lean below).
-- Packed, the table read holds the fields of its own and finds the packed ones through its
-- metatable (`__index`), whose `text` keeps the packed JSON as stored, for offer_json: no
-- copying of the packed fields into the table, and no sorting them out again for the record.
local function read_offer(key)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then return nil end
  local offer = hash_to_table(flat)
  local name = 'rest'
  local text = offer[name]
  if text == nil then
    name = 'body'
    text = offer[name]
    if text == nil then return offer end
  end
  offer[name] = nil
  local packed = cjson.decode(text)
  for k in pairs(offer) do
    if packed[k] ~= nil then  -- a field on its own and packed too: unpack, its own wins
      for field, v in pairs(packed) do
        if offer[field] == nil then offer[field] = v end
      end
      return setmetatable(offer, {lean_form = name == 'body'})
    end
  end
  return setmetatable(offer, {__index = packed, text = text, lean_form = name == 'body'})
end

-- True when the offer is lean: its hash has no expiry until its outcome sets one.
local function lean(offer)
  local meta = getmetatable(offer)
  return meta ~= nil and meta.lean_form
end

-- The offer as a record's JSON object: every field, the packed ones spliced in as they are
-- stored rather than decoded and encoded again (cjson encodes a table's own fields only).
local function offer_json(offer)
  local meta = getmetatable(offer)
  if meta == nil or meta.text == nil then return cjson.encode(offer) end
  if next(offer) == nil then return meta.text end
  local own = cjson.encode(offer)
  if next(meta.__index) == nil then return own end
  return string.sub(meta.text, 1, -2) .. ',' .. string.sub(own, 2)
end

-- The campaign's budget fields on this shard, as HMGET gives them: {t, r, s, g, a}.
local function read_budget(budget_key, cid)
  return redis.call('HMGET', budget_key, cid .. ':t', cid .. ':r', cid .. ':s', cid .. ':g',
                    cid .. ':a')
end

-- True when spending `amount` more would take the campaign past its total (`b` from
-- read_budget). A reservation was checked against the total when it was made, so this happens
-- only when an operator lowered the total below what was already reserved: the reservation
-- cannot be honoured any more. On a budget slice, the slice's own part stands for the total
-- (t - g on the home, the allowance a elsewhere): a lowered total takes allowances back
-- (HotState.shrink).
local function over_total(b, amount)
  if b[1] ~= false then return num(b[3]) + amount > num(b[1]) - num(b[4]) end
  return b[5] ~= false and num(b[3]) + amount > num(b[5])
end

local function day_key_for(offer, today_key, yesterday_key, today, yesterday)
  if offer['day'] == today then return today_key end
  if offer['day'] == yesterday then return yesterday_key end
  return nil
end

-- An offer that ended without a play (rejected, expired, lost) gives its count back to the
-- frequency cap of its clock hour, while that hour lasts: the cap limits plays, and an open or
-- accepted offer still counts as one. `freq_key` is the shard's hash of the current hour, so
-- it is the offer's own when the hours match (a past hour's cap is over: left alone).
local function release_play(freq_key, offer, status, at_ms)
  if offer['freq_hour'] == nil or status == 'accepted' or status == 'billed' then return end
  if offer['freq_hour'] + 0 ~= math.floor(at_ms / 3600000) then return end
  local field = offer['campaign'] .. ':' .. offer['screen']
  if num(redis.call('HGET', freq_key, field)) > 0 then
    redis.call('HINCRBY', freq_key, field, -1)
  end
end

-- Release an open offer's reservation and mark it with a final status (and the name, value
-- pairs of `more`, written with it). Returns the campaign's budget triple after the change,
-- worked out from its fields before it (`budget`, read_budget's, read here unless given).
local function settle(budget_key, day_key, offer_key, offer, status, spend, at_ms, freq_key,
                      more, budget)
  local cid = offer['campaign']
  local price = offer['price'] + 0
  local b = budget or read_budget(budget_key, cid)
  release_play(freq_key, offer, status, at_ms)
  local release = '-' .. offer['price']  -- as stored: no number formatted again
  redis.call('HINCRBY', budget_key, cid .. ':r', release)
  if spend > 0 then redis.call('HINCRBY', budget_key, cid .. ':s', spend) end
  if day_key then
    local counted = offer['day_counted'] ~= '0'
    if counted then redis.call('HINCRBY', day_key, cid .. ':r', release) end
    -- A reservation left out of the day hash did not create it (a counted one did, with its
    -- expiry): its spending may. Asked only when the campaign's field is new (the answer is
    -- then exactly what was added).
    if spend > 0 and redis.call('HINCRBY', day_key, cid .. ':s', spend) == spend
        and not counted and redis.call('PTTL', day_key) < 0 then
      redis.call('PEXPIRE', day_key, 259200000)
    end
  end
  redis.call('HSET', offer_key, 'status', status, 'resolved_ms', at_ms, unpack(more or {}))
  offer['status'] = status
  offer['resolved_ms'] = tostring(at_ms)
  for i = 1, #(more or {}), 2 do offer[more[i]] = more[i + 1] end
  return {num(b[1]), num(b[2]) - price, num(b[3]) + spend}
end

local function enqueue(queue_key, kind, offer, payload, extra)
  redis.call('XADD', queue_key, '*', 't', kind, 'o', offer_json(offer), 'p', payload,
             'x', cjson.encode(extra))
end

-- Expire an open offer now: release its reservation, take it off the expiry set, record the
-- outcome. The sweeper's way, and an answer's when the offer can no longer be honoured.
local function expire_now(budget_key, day_key, offer_key, offer, queue_key, expiry_key, now,
                          freq_key)
  settle(budget_key, day_key, offer_key, offer, 'expired', 0, now, freq_key)
  redis.call('ZREM', expiry_key, offer['offer_id'])
  enqueue(queue_key, 'offer_expired', offer, '{}', {})
end
