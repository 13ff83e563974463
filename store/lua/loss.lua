-- An OpenRTB loss notice. The first notice for a bid is recorded and, while the bid is still
-- open, releases its reservation (the bid is then lost, or expired when past its expiry); a
-- notice after billing is recorded and changes nothing.
-- Retries only increment the counter.
-- KEYS: 1 offer hash, 2 budget hash, 3 today's day hash, 4 yesterday's day hash,
--       5 record queue, 6 expiry zset, 7 this hour's frequency hash
-- ARGV: 1 now_ms, 2 today, 3 yesterday, 4 notice payload (JSON), 5 offer key ttl ms,
--       6 deadline (epoch ms, 0: none; see too_late)
-- Returns {status, count}: status 'first' | 'retry' | 'unknown' | 'late'.
if too_late(ARGV[6]) then return {'late', 0} end
local offer = read_offer(KEYS[1])
if offer == nil then return {'unknown', 0} end
if offer['channel'] ~= 'openrtb' then return {'unknown', 0} end
local count = redis.call('HINCRBY', KEYS[1], 'loss_count', 1)
if count > 1 then return {'retry', count} end
local now = ARGV[1] + 0
local extra = {after_billing = offer['status'] == 'billed', released = 0}
local renew = true
if offer['status'] == 'open' then
  extra['released'] = offer['price'] + 0
  -- A bid past its expiry is expired, as an answer finds it on the Core side, whether the
  -- sweeper got to it first or this notice did.
  local final = offer['expires_ms'] + 0 > now and 'lost' or 'expired'
  settle(KEYS[2], day_key_for(offer, KEYS[3], KEYS[4], ARGV[2], ARGV[3]), KEYS[1], offer,
         final, 0, now, KEYS[7])
  redis.call('ZREM', KEYS[6], offer['offer_id'])
  -- A bid lost before its expiry keeps the reservation's ttl, its time to expiry plus the
  -- retention (ARGV[5]): the retention is left without a PEXPIRE. A lean bid has none yet.
  renew = final ~= 'lost' or lean(offer)
end
if renew then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
enqueue(KEYS[5], 'loss_notice', offer, ARGV[4], extra)
return {'first', count}
