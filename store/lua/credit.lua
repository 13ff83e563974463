-- Budget slices: credit a chunk the home granted (grant.lua) or gave back (release.lua) to a
-- slice's allowance, or give reclaimed allowance back to the home's `g`. Nothing is changed
-- after the deadline the debit set, so reconcile knows when a move can no longer land
-- (docs/architecture.md, "Budget slices").
-- KEYS: 1 the budget hash credited
-- ARGV: 1 campaign id, 2 amount, 3 deadline ms, 4 field ('a': a slice's allowance grows;
--       'g': the home's granted shrinks, never below 0)
-- Returns 1 when credited, 0 when past the deadline.
if too_late(ARGV[3]) then return 0 end
local cid, amount, part = ARGV[1], tonumber(ARGV[2]), ARGV[4]
if part == 'a' then
  redis.call('HINCRBY', KEYS[1], cid .. ':a', string.format('%.0f', amount))
  redis.call('HSET', KEYS[1], cid .. ':am', string.format('%.0f', now_ms()))
else
  local granted = num(redis.call('HGET', KEYS[1], cid .. ':g'))
  local left = granted > amount and granted - amount or 0
  redis.call('HSET', KEYS[1], cid .. ':g', string.format('%.0f', left),
             cid .. ':gm', string.format('%.0f', now_ms()))
end
return 1
