-- A tracking pixel fired. Every call is recorded; an OpenRTB `impression` on an open bid bills
-- it (spend at the bid price, a billing record), exactly once however often it fires, unless
-- its campaign's total was lowered below what that would spend (then it is only recorded).
-- KEYS: 1 offer hash, 2 budget hash, 3 today's day hash, 4 yesterday's day hash,
--       5 record queue, 6 expiry zset, 7 this hour's frequency hash, 8 billing codes hash
-- ARGV: 1 now_ms, 2 today, 3 yesterday, 4 event name, 5 event payload (JSON),
--       6 billing payload (JSON), 7 offer key ttl ms after resolution,
--       8 deadline (epoch ms, 0: none; see too_late)
-- Returns {status, channel}: status 'billed' | 'recorded', the offer's channel (core|openrtb);
-- or {'unknown'} | {'late'}.
if too_late(ARGV[8]) then return {'late'} end
local offer_flat = redis.call('HGETALL', KEYS[1])
if #offer_flat == 0 then return {'unknown'} end
local offer = hash_to_table(offer_flat)
local now = tonumber(ARGV[1])
local status = 'recorded'
local extra = {billed = false}
if ARGV[4] == 'impression' and offer['channel'] == 'openrtb' and offer['status'] == 'open'
    and tonumber(offer['expires_ms']) > now
    and not over_total(KEYS[2], offer['campaign'], tonumber(offer['price'])) then
  settle(KEYS[2], day_key_for(offer, KEYS[3], KEYS[4], ARGV[2], ARGV[3]), KEYS[1], offer,
         'billed', tonumber(offer['price']), now, KEYS[7])
  redis.call('ZREM', KEYS[6], offer['offer_id'])
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[7]))
  local code = redis.call('HGET', KEYS[8], offer['advertiser'] .. ':' .. offer['publisher'])
  enqueue(KEYS[5], 'impression_billed', offer, ARGV[6], {billing_code = code or cjson.null})
  status = 'billed'
  extra['billed'] = true
end
enqueue(KEYS[5], 'tracking_event', offer, ARGV[5], extra)
return {status, offer['channel']}
