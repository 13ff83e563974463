-- A top-up's new total budget, stamped with the inventory version its transaction bumped to.
-- Two top-ups, or a top-up and an import, can reach Redis in the other order than they
-- committed: a total stamped with an older version than the one there is dropped, so the
-- newest committed total stays (sync_totals.lua keeps it from older reads too).
-- KEYS: 1 budget hash of the campaign's shard
-- ARGV: 1 campaign id, 2 total micro-cents, 3 inventory version
-- Returns 1 when written, 0 when a newer total was there.
local stamp = redis.call('HGET', KEYS[1], ARGV[1] .. ':tv')
if stamp and tonumber(stamp) > tonumber(ARGV[3]) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1] .. ':t', ARGV[2], ARGV[1] .. ':tv', ARGV[3])
return 1
