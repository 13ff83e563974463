-- Set campaigns' total budgets from an inventory read, stamped with that read's inventory
-- version, except a total a top-up of a newer version wrote: the read predates that top-up,
-- and writing its total back would undo it (HotState.sync_inventory).
-- KEYS: 1 budget hash of one shard
-- ARGV: 1 the read's inventory version, 2 force (1: write every total, for a stamp that no
--       read catches up with: Postgres restored to an older version), then pairs: campaign
--       id, total micro-cents
-- Returns {how many totals were left as a newer top-up wrote them, then the campaigns whose
-- new total is below what their budget slices hold (granted, reserved and spent: the caller
-- takes allowances back, HotState.shrink)}.
local version = tonumber(ARGV[1])
local force = ARGV[2] == '1'
local kept = 0
local short = {}
for i = 3, #ARGV, 2 do
  local cid = ARGV[i]
  local stamp = redis.call('HGET', KEYS[1], cid .. ':tv')
  if not force and stamp and tonumber(stamp) > version then
    kept = kept + 1
  else
    redis.call('HSET', KEYS[1], cid .. ':t', ARGV[i + 1], cid .. ':tv', version)
    local b = redis.call('HMGET', KEYS[1], cid .. ':g', cid .. ':r', cid .. ':s')
    if b[1] and num(b[1]) > 0 and num(b[1]) + num(b[2]) + num(b[3]) > tonumber(ARGV[i + 1]) then
      table.insert(short, cid)
    end
  end
end
return {kept, unpack(short)}
