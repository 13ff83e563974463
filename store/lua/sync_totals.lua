-- Set campaigns' total budgets from an inventory read, stamped with that read's inventory
-- version, except a total a top-up of a newer version wrote: the read predates that top-up,
-- and writing its total back would undo it (HotState.sync_inventory).
-- KEYS: 1 budget hash of one shard
-- ARGV: 1 the read's inventory version, 2 force (1: write every total, for a stamp that no
--       read catches up with: Postgres restored to an older version), then pairs: campaign
--       id, total micro-cents
-- Returns how many totals were left as a newer top-up wrote them.
local version = tonumber(ARGV[1])
local force = ARGV[2] == '1'
local kept = 0
for i = 3, #ARGV, 2 do
  local cid = ARGV[i]
  local stamp = redis.call('HGET', KEYS[1], cid .. ':tv')
  if not force and stamp and tonumber(stamp) > version then
    kept = kept + 1
  else
    redis.call('HSET', KEYS[1], cid .. ':t', ARGV[i + 1], cid .. ':tv', version)
  end
end
return kept
