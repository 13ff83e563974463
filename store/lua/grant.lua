-- Budget slices: the home of a campaign grants a chunk of its free budget to another slice
-- (docs/architecture.md, "Budget slices"). The money leaves the home first (`g` grows); the
-- caller then credits it to the slice (credit.lua). A crash in between strands the chunk in
-- `g` (under-spend, never overspend): reconcile gives it back.
-- KEYS: 1 the home's budget hash
-- ARGV: 1 campaign id, 2 amount needed (what the slice lacks for a reservation), 3 slices,
--       4 the credit's window ms (credit.lua changes nothing after it), 5 the price of that
--       reservation
-- Returns {granted, credit deadline ms, total, reserved, spent} (the home's budget triple, for
-- the workers' budget view): granted 0 when the home's free budget is below the amount
-- needed, -1 when the campaign has no total here.
local cid, need, slices = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local b = redis.call('HMGET', KEYS[1], cid .. ':t', cid .. ':g', cid .. ':r', cid .. ':s')
if b[1] == false then return {-1, 0, 0, 0, 0} end
local free = num(b[1]) - num(b[2]) - num(b[3]) - num(b[4])
if free < need or need <= 0 then return {0, 0, num(b[1]), num(b[3]), num(b[4])} end
-- A share of what is free, so each slice asks again only after spending it; all of it once
-- what would stay at the home is less than the price.
local chunk = math.max(need, math.floor(free / (2 * slices)))
if free - chunk < tonumber(ARGV[5]) then chunk = free end
redis.call('HINCRBY', KEYS[1], cid .. ':g', string.format('%.0f', chunk))
local now = now_ms()
redis.call('HSET', KEYS[1], cid .. ':gm', string.format('%.0f', now))
return {chunk, now + tonumber(ARGV[4]), num(b[1]), num(b[3]), num(b[4])}
