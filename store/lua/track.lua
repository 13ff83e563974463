-- A tracking pixel fired. Each event of an offer is recorded once: a replay of the same event
-- (the same pixel fired again, a player's retry, a copied URL) changes nothing and is answered
-- 'replay', for the caller to count. An OpenRTB `impression` on an open bid bills it (spend at
-- the bid price, a billing record), unless its campaign's total was lowered below what that
-- would spend (then it is only recorded).
-- KEYS: 1 offer hash, 2 budget hash, 3 today's day hash, 4 yesterday's day hash,
--       5 record queue, 6 expiry zset, 7 this hour's frequency hash, 8 billing codes hash,
--       9 the offer's set of recorded events
-- ARGV: 1 now_ms, 2 today, 3 yesterday, 4 event name, 5 event payload (JSON),
--       6 billing payload (JSON), 7 offer key ttl ms after resolution,
--       8 deadline (epoch ms, 0: none; see too_late)
-- Returns {status, channel}: status 'billed' | 'recorded' | 'replay', the offer's channel
-- (core|openrtb); or {'unknown'} | {'late'}.
if too_late(ARGV[8]) then return {'late'} end
local offer = read_offer(KEYS[1])
if offer == nil then return {'unknown'} end
-- The set outlives the offer hash: it lasts as long as the offer's remaining time or the
-- retention after resolution, whichever is longer, refreshed by every call.
local keep = redis.call('PTTL', KEYS[1])
if keep < 0 then
  -- A lean offer still open: its time to expiry, then the retention, and an hour for the
  -- sweeper's lag (its expiry gives the hash the retention when the sweeper gets to it).
  keep = offer['expires_ms'] - ARGV[1] + ARGV[7] + 3600000
end
if keep < ARGV[7] + 0 then keep = ARGV[7] + 0 end
local first = redis.call('SADD', KEYS[9], ARGV[4])
redis.call('PEXPIRE', KEYS[9], keep)
if first == 0 then return {'replay', offer['channel']} end
local now = ARGV[1] + 0
local status = 'recorded'
local extra = {billed = false}
local budget, price = nil, nil
if ARGV[4] == 'impression' and offer['channel'] == 'openrtb' and offer['status'] == 'open'
    and offer['expires_ms'] + 0 > now then
  budget, price = read_budget(KEYS[2], offer['campaign']), offer['price'] + 0
end
if budget and not over_total(budget, price) then
  settle(KEYS[2], day_key_for(offer, KEYS[3], KEYS[4], ARGV[2], ARGV[3]), KEYS[1], offer,
         'billed', price, now, KEYS[7], nil, budget)
  redis.call('ZREM', KEYS[6], offer['offer_id'])
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
  local code = redis.call('HGET', KEYS[8], offer['advertiser'] .. ':' .. offer['publisher'])
  enqueue(KEYS[5], 'impression_billed', offer, ARGV[6], {billing_code = code or cjson.null})
  status = 'billed'
  extra['billed'] = true
end
enqueue(KEYS[5], 'tracking_event', offer, ARGV[5], extra)
return {status, offer['channel']}
