-- Confirm a deal's playout. Idempotent: the first confirmation is recorded, a repeat returns
-- the first playout's id and records nothing.
-- KEYS: 1 deal key (a hash, or one JSON string for a lean offer's deal: respond.lua),
--       2 record queue
-- ARGV: 1 publisher id, 2 playout id, 3 confirmed_ms, 4 record payload (JSON),
--       5 deadline (epoch ms, 0: none; see too_late)
-- Returns {'new'|'repeat', playout id, confirmed_ms}, {'not_found'} or {'late'}.
if too_late(ARGV[5]) then return {'late'} end
local string_deal = redis.call('TYPE', KEYS[1])['ok'] == 'string'
local deal
if string_deal then
  deal = cjson.decode(redis.call('GET', KEYS[1]))
else
  deal = hash_to_table(redis.call('HGETALL', KEYS[1]))  -- empty when there is no deal
end
if deal['offer_id'] == nil or deal['publisher'] ~= ARGV[1] then return {'not_found'} end
if deal['playout_id'] then return {'repeat', deal['playout_id'], deal['confirmed_ms']} end
if string_deal then
  deal['playout_id'], deal['confirmed_ms'] = ARGV[2], ARGV[3]
  redis.call('SET', KEYS[1], cjson.encode(deal), 'KEEPTTL')
  deal['playout_id'], deal['confirmed_ms'] = nil, nil  -- the record has the deal as it was
else
  redis.call('HSET', KEYS[1], 'playout_id', ARGV[2], 'confirmed_ms', ARGV[3])
end
enqueue(KEYS[2], 'playout_confirmed', deal, ARGV[4], {})
return {'new', ARGV[2], ARGV[3]}
