-- Budget slices: credit a chunk the home granted (grant.lua) or gave back (release.lua) to a
-- slice's allowance, or give reclaimed allowance back to the home's `g`. Nothing is changed
-- after the deadline the debit set, so reconcile knows when a move can no longer land
-- (docs/architecture.md, "Budget slices").
-- KEYS: 1 the budget hash credited (a day hash for 'da' and 'dg')
-- ARGV: 1 campaign id, 2 amount, 3 deadline ms (0: none), 4 field ('a': a slice's allowance
--       grows; 'g': the home's granted shrinks, never below 0; 'da', 'dg': the same of
--       today's daily allowance and grants)
-- Returns 1 when credited, 0 when past the deadline.
if too_late(ARGV[3]) then return 0 end
local cid, amount, part = ARGV[1], tonumber(ARGV[2]), ARGV[4]
if part == 'a' or part == 'da' then
  redis.call('HINCRBY', KEYS[1], cid .. ':' .. part, string.format('%.0f', amount))
else
  local granted = num(redis.call('HGET', KEYS[1], cid .. ':' .. part))
  local left = granted > amount and granted - amount or 0
  redis.call('HSET', KEYS[1], cid .. ':' .. part, string.format('%.0f', left))
end
if part == 'a' or part == 'g' then  -- when the allowances last moved (reconcile)
  redis.call('HSET', KEYS[1], cid .. ':' .. part .. 'm', string.format('%.0f', now_ms()))
elseif redis.call('PTTL', KEYS[1]) < 0 then  -- a day hash this credit made
  redis.call('PEXPIRE', KEYS[1], 259200000)
end
return 1
