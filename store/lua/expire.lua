-- Expire one offer whose time is up: release its reservation, record the outcome. Safe to run
-- from any number of workers at once: only an offer still open is settled, once.
-- KEYS: 1 offer hash, 2 budget hash, 3 today's day hash, 4 yesterday's day hash,
--       5 record queue, 6 expiry zset, 7 this hour's frequency hash
-- ARGV: 1 offer id, 2 now_ms, 3 today, 4 yesterday, 5 offer key ttl ms after resolution
-- Returns the offer's channel ('core' | 'openrtb') when this call expired it, '' otherwise.
local offer = read_offer(KEYS[1])
if offer == nil then
  redis.call('ZREM', KEYS[6], ARGV[1])
  return ''
end
local now = ARGV[2] + 0
if offer['status'] ~= 'open' then
  redis.call('ZREM', KEYS[6], ARGV[1])
  return ''
end
if offer['expires_ms'] + 0 > now then return '' end
expire_now(KEYS[2], day_key_for(offer, KEYS[3], KEYS[4], ARGV[3], ARGV[4]), KEYS[1], offer,
           KEYS[5], KEYS[6], now, KEYS[7])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return offer['channel'] or ''
