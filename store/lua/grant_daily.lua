-- Budget slices: the home of a campaign with a daily limit grants a chunk of today's limit it
-- has not used nor granted to another slice (docs/architecture.md, "Budget slices"). The
-- amount leaves the home first (`dg` grows in today's day hash); the caller then credits the
-- slice's `da` (credit.lua). A crash in between strands it for the day: fewer plays, never
-- more than the limit.
-- KEYS: 1 the home's day hash of today, 2 the home's budget hash (its open reservations count
--       against today's limit, _common.lua)
-- ARGV: 1 campaign id, 2 amount needed, 3 slices, 4 the daily limit, 5 the price
-- Returns the amount granted, 0 when the home has less than the amount needed.
local cid, need, slices = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local d = redis.call('HMGET', KEYS[1], cid .. ':s', cid .. ':dg')
local reserved = num(redis.call('HGET', KEYS[2], cid .. ':r'))
local free = tonumber(ARGV[4]) - reserved - num(d[1]) - num(d[2])
if free < need or need <= 0 then return 0 end
local chunk = math.max(need, math.floor(free / (2 * slices)))
if free - chunk < tonumber(ARGV[5]) then chunk = free end
redis.call('HINCRBY', KEYS[1], cid .. ':dg', string.format('%.0f', chunk))
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], 259200000) end
return chunk
