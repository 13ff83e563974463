-- Create an offer (Core) or a bid (OpenRTB) and reserve its price, atomically.
-- It enqueues no record: the open offer lives only in Redis, and its outcome record (accept,
-- reject, loss, impression, tracking, expiry) carries the whole offer hash to Postgres
-- (docs/decisions.md, "An open offer lives only in Redis").
-- KEYS: 1 budget hash, 2 today's day hash, 3 this hour's frequency hash, 4 offer hash,
--       5 expiry zset
-- ARGV: 1 campaign id, 2 price, 3 daily limit ('-1': none), 4 frequency cap ('-1': none),
--       5 screen id, 6 now_ms, 7 expires_ms, 8 offer key ttl ms ('0': none, a lean offer's),
--       9 offer id,
--       10 deadline (epoch ms, 0: none; see too_late), 11 '1' to add the price to today's
--       reserved counter too (COUNT_DAY_RESERVATIONS; with '0' the offer's fields say so,
--       _common.lua), 12.. the offer hash's other field/value pairs (`status`, `campaign` and
--       `price` are written from the arguments above)
-- Returns {1, total, reserved, spent} or {0, reason, total, reserved, spent}, the refusals
-- 'budget', 'slice_budget', 'daily_budget' and 'slice_daily' followed by what the slice has
-- free of it. On a budget
-- slice other than the home, total is 0 and a slice without enough allowance answers
-- 'slice_budget', one never granted any 'unknown_campaign' (either way the caller asks the
-- home for a grant, grant.lua), one short of today's allowance 'slice_daily' (grant_daily.lua).
if too_late(ARGV[10]) then return {0, 'late', 0, 0, 0} end
local cid, price = ARGV[1], ARGV[2] + 0
local reserved_field = cid .. ':r'
local b = redis.call('HMGET', KEYS[1], cid .. ':t', reserved_field, cid .. ':s', cid .. ':g',
                     cid .. ':a')
local total, reserved, spent = num(b[1]), num(b[2]), num(b[3])
if b[1] ~= false then
  local free = total - num(b[4]) - reserved - spent
  if free < price then return {0, 'budget', total, reserved, spent, free} end
elseif b[5] == false then
  return {0, 'unknown_campaign', 0, 0, 0}
elseif num(b[5]) - reserved - spent < price then
  return {0, 'slice_budget', 0, reserved, spent, num(b[5]) - reserved - spent}
end
if ARGV[3] ~= '-1' then
  local daily_limit = ARGV[3] + 0
  -- Today's limit covers today's spending and every open reservation of the slice (_common.lua:
  -- those of the last minutes of yesterday too, for at most an offer's lifetime after
  -- midnight). With slices the home's share of the limit is what it did not grant (`dg`),
  -- another slice's is its daily allowance (`da`), both in the day hash.
  local d = redis.call('HMGET', KEYS[2], cid .. ':s', cid .. ':dg', cid .. ':da')
  local used = reserved + num(d[1])
  if b[1] ~= false then
    if daily_limit - num(d[2]) - used < price then
      return {0, 'daily_budget', total, reserved, spent, daily_limit - num(d[2]) - used}
    end
  elseif num(d[3]) - used < price then
    return {0, 'slice_daily', 0, reserved, spent, num(d[3]) - used}
  end
end
local freq_field = ARGV[4] ~= '-1' and cid .. ':' .. ARGV[5]
if freq_field and num(redis.call('HGET', KEYS[3], freq_field)) >= ARGV[4] + 0 then
  return {0, 'frequency_cap', total, reserved, spent}
end

-- Numbers go to Redis as the argument strings they came as, not formatted again.
redis.call('HINCRBY', KEYS[1], reserved_field, ARGV[2])
-- A hash gets its expiry when one of its fields is created (the answer is then exactly what
-- was added), not on every reservation: that is when the key can have been created.
-- Today's reserved counter is for the workers of earlier releases, whose daily check reads it.
if ARGV[11] == '1' and redis.call('HINCRBY', KEYS[2], reserved_field, ARGV[2]) == price then
  redis.call('PEXPIRE', KEYS[2], 259200000)
end
if freq_field and redis.call('HINCRBY', KEYS[3], freq_field, 1) == 1 then
  redis.call('PEXPIRE', KEYS[3], 7200000)
end
if freq_field then  -- the clock hour whose cap counts it (see release_play)
  redis.call('HSET', KEYS[4], 'status', 'open', 'campaign', cid, 'price', ARGV[2],
             'freq_hour', math.floor(ARGV[6] / 3600000), unpack(ARGV, 12))
else
  redis.call('HSET', KEYS[4], 'status', 'open', 'campaign', cid, 'price', ARGV[2],
             unpack(ARGV, 12))
end
if ARGV[8] ~= '0' then redis.call('PEXPIRE', KEYS[4], ARGV[8]) end
redis.call('ZADD', KEYS[5], ARGV[7], ARGV[9])
return {1, total, reserved + price, spent}
