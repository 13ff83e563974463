-- Set campaigns' total budgets from an inventory read, except a total that a top-up wrote
-- after the read began: the read may predate the top-up, and writing its total back would
-- undo it until the next sync (HotState.sync_inventory).
-- KEYS: 1 budget hash of one shard
-- ARGV: 1 when the read began (epoch ms, Redis' clock; 0: write every total),
--       then pairs: campaign id, total micro-cents
-- Returns how many totals were left as a later top-up wrote them.
local since = tonumber(ARGV[1])
local kept = 0
for i = 2, #ARGV, 2 do
  local cid = ARGV[i]
  local topped = since > 0 and redis.call('HGET', KEYS[1], cid .. ':tu')
  if topped and tonumber(topped) >= since then
    kept = kept + 1
  else
    redis.call('HSET', KEYS[1], cid .. ':t', ARGV[i + 1])
  end
end
return kept
