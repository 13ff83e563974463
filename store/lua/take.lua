-- Budget slices: take allowance back from a slice (the home then lowers its `g`, credit.lua
-- with 'g'). The money leaves the slice first: a crash in between strands it in `g`.
-- KEYS: 1 the hash of the allowance: the slice's budget hash, its day hash of today for 'da';
--       2 the slice's budget hash, whose open reservations count against either (_common.lua)
-- ARGV: 1 campaign id, 2 amount wanted, 3 force ('1': also the allowance backing open
--       reservations, when the total was lowered below what is out; the slice then refuses
--       accepts past what it keeps, as over_total does; never what backs its spending, which
--       would leave that spending counted against no total), 4 the credit's window ms, 5 the
--       allowance ('a', or 'da': today's daily allowance, given back to the home's `dg`)
-- Returns {taken, credit deadline ms}.
local cid, want = ARGV[1], tonumber(ARGV[2])
local field = ARGV[5] or 'a'
local b = redis.call('HMGET', KEYS[1], cid .. ':' .. field, cid .. ':s')
local reserved = num(redis.call('HGET', KEYS[2], cid .. ':r'))
local allowance = num(b[1])
local free = allowance - reserved - num(b[2])
local taken = want
if ARGV[3] == '1' then
  local unspent = allowance - num(b[2])
  if unspent < taken then taken = unspent end
elseif free < taken then
  taken = free
end
if taken <= 0 then return {0, 0} end
redis.call('HINCRBY', KEYS[1], cid .. ':' .. field, string.format('%.0f', -taken))
local now = now_ms()
if field == 'a' then redis.call('HSET', KEYS[1], cid .. ':am', string.format('%.0f', now)) end
return {taken, now + tonumber(ARGV[4])}
