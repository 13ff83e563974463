-- A publisher answers an offer: accept (settle at the accepted price) or reject (release).
-- Exactly one answer wins; an offer past its expiry is expired here and answered "not found",
-- and so is an accept its campaign's total (lowered since the offer) can no longer pay.
-- KEYS: 1 offer hash, 2 budget hash, 3 today's day hash, 4 yesterday's day hash,
--       5 record queue, 6 expiry zset, 7 this hour's frequency hash, 8 billing codes hash,
--       9 deal key (accept only: a hash, or one JSON string for a lean offer's deal)
-- ARGV: 1 action (accept|reject), 2 publisher id, 3 now_ms, 4 today, 5 yesterday,
--       6 accepted price (accept) or '' , 7 record payload (JSON), 8 deal id, 9 deal ttl ms,
--       10 offer key ttl ms after resolution (kept: the reservation's ttl covers it),
--       11 deadline (epoch ms, 0: none; see too_late)
-- Returns {1, campaign id, billing code or false, total, reserved, spent} or {0, reason, detail}
if too_late(ARGV[11]) then return {0, 'late', ''} end
local offer = read_offer(KEYS[1])
if offer == nil then return {0, 'not_found', ''} end
local now = ARGV[3] + 0
if offer['status'] ~= 'open' or offer['channel'] ~= 'core' or offer['publisher'] ~= ARGV[2] then
  return {0, 'not_found', ''}
end
local day_key = day_key_for(offer, KEYS[3], KEYS[4], ARGV[4], ARGV[5])
local is_lean = lean(offer)
if offer['expires_ms'] + 0 <= now then
  expire_now(KEYS[2], day_key, KEYS[1], offer, KEYS[5], KEYS[6], now, KEYS[7])
  if is_lean then redis.call('PEXPIRE', KEYS[1], ARGV[10]) end
  return {0, 'not_found', ''}
end
local code = redis.call('HGET', KEYS[8], offer['advertiser'] .. ':' .. offer['publisher'])
local extra = {billing_code = code or cjson.null}
local b
if ARGV[1] == 'accept' then
  local accepted = ARGV[6] + 0
  if accepted > offer['price'] + 0 then return {0, 'above_bid', offer['price']} end
  local budget = read_budget(KEYS[2], offer['campaign'])
  if over_total(budget, accepted) then  -- the budget was lowered since
    expire_now(KEYS[2], day_key, KEYS[1], offer, KEYS[5], KEYS[6], now, KEYS[7])
    if is_lean then redis.call('PEXPIRE', KEYS[1], ARGV[10]) end
    return {0, 'not_found', 'over_total'}
  end
  b = settle(KEYS[2], day_key, KEYS[1], offer, 'accepted', accepted, now, KEYS[7],
             {'deal_id', ARGV[8], 'accepted_price', ARGV[6]}, budget)
  if is_lean then  -- the deal as one string: created with its expiry, no PEXPIRE
    redis.call('SET', KEYS[9], cjson.encode({deal_id = ARGV[8], offer_id = offer['offer_id'],
               publisher = offer['publisher'], campaign = offer['campaign'],
               screen = offer['screen']}), 'PX', ARGV[9])
  else
    redis.call('HSET', KEYS[9], 'deal_id', ARGV[8], 'offer_id', offer['offer_id'],
               'publisher', offer['publisher'],
               'campaign', offer['campaign'], 'screen', offer['screen'])
    redis.call('PEXPIRE', KEYS[9], ARGV[9])
  end
  enqueue(KEYS[5], 'offer_accepted', offer, ARGV[7], extra)
else
  b = settle(KEYS[2], day_key, KEYS[1], offer, 'rejected', 0, now, KEYS[7])
  enqueue(KEYS[5], 'offer_rejected', offer, ARGV[7], extra)
end
redis.call('ZREM', KEYS[6], offer['offer_id'])
-- A packed offer's reservation gave the hash its time to expiry plus the retention (ARGV[10]),
-- and an offer answered is one not yet expired, so the retention is left (less any skew
-- between the clocks of the workers that reserved and answered it). A lean one has no expiry
-- yet: it gets the retention now.
if is_lean then redis.call('PEXPIRE', KEYS[1], ARGV[10]) end
return {1, offer['campaign'], code, b[1], b[2], b[3]}
