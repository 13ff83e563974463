-- A top-up's new total budget, stamped with when it was written (epoch ms, Redis' clock), so
-- an inventory sync whose read began earlier leaves it alone (sync_totals.lua).
-- KEYS: 1 budget hash of the campaign's shard
-- ARGV: 1 campaign id, 2 total micro-cents
-- Returns the stamp.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1] .. ':t', ARGV[2], ARGV[1] .. ':tu', now_ms)
return now_ms
