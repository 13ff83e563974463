-- Repair one campaign's budget counters, only if they still hold the values reconcile read
-- (compare-and-set), so a repair never overwrites a change made meanwhile.
-- KEYS: 1 budget hash
-- ARGV: 1 campaign id, then triples: field suffix (t|r|s), expected value, new value
-- Returns 1 when set, 0 when a counter moved since it was read (nothing is changed then).
local cid = ARGV[1]
for i = 2, #ARGV, 3 do
  local current = redis.call('HGET', KEYS[1], cid .. ':' .. ARGV[i]) or '0'
  if tonumber(current) ~= tonumber(ARGV[i + 1]) then return 0 end
end
for i = 2, #ARGV, 3 do
  redis.call('HSET', KEYS[1], cid .. ':' .. ARGV[i], ARGV[i + 2])
end
return 1
