-- Confirm a deal's playout. Idempotent: the first confirmation is recorded, a repeat returns
-- the first playout's id and records nothing.
-- KEYS: 1 deal hash, 2 record queue
-- ARGV: 1 publisher id, 2 playout id, 3 confirmed_ms, 4 record payload (JSON),
--       5 deadline (epoch ms, 0: none; see too_late)
-- Returns {'new'|'repeat', playout id, confirmed_ms}, {'not_found'} or {'late'}.
if too_late(ARGV[5]) then return {'late'} end
local deal = hash_to_table(redis.call('HGETALL', KEYS[1]))
if deal['offer_id'] == nil or deal['publisher'] ~= ARGV[1] then return {'not_found'} end
if deal['playout_id'] then return {'repeat', deal['playout_id'], deal['confirmed_ms']} end
redis.call('HSET', KEYS[1], 'playout_id', ARGV[2], 'confirmed_ms', ARGV[3])
enqueue(KEYS[2], 'playout_confirmed', deal, ARGV[4], {})
return {'new', ARGV[2], ARGV[3]}
