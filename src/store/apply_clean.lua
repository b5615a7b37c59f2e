-- Applies the outcome of a node's /clean + fold to the session mappings, in
-- one step: expired sessions are unmapped (counts kept exact); live sessions
-- still on the node take their new base (their node count restarted at 0).
-- A session no longer mapped to this node is left alone. The expiry lists
-- keep the unmapped ids until the sweep passes their second (it skips them).
-- KEYS[1] node hash, KEYS[2] placeable zset.
-- ARGV: prefix, address, number of expired ids E, E ids, then id/base pairs.
-- Returns the number of sessions unmapped.
local prefix, addr, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local number = redis.call('HGET', prefix .. 'node_numbers', addr)
if not number then
  return 0
end
local unmapped = 0
for i = 4, 3 + n do
  local id = ARGV[i]
  local key = mapping_key(prefix, id)
  local value = redis.call('HGET', key, id)
  if value and unpack_mapping(value) == number then
    redis.call('HDEL', key, id)
    unmapped = unmapped + 1
  end
end
if unmapped > 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'sessions', -unmapped)
  end
  if redis.call('ZSCORE', KEYS[2], addr) then
    redis.call('ZINCRBY', KEYS[2], -unmapped, addr)
  end
end
for i = 4 + n, #ARGV, 2 do
  local id = ARGV[i]
  local key = mapping_key(prefix, id)
  local value = redis.call('HGET', key, id)
  if value then
    local on, _, exp = unpack_mapping(value)
    if on == number then
      redis.call('HSET', key, id, number .. ':' .. ARGV[i + 1] .. ':' .. exp)
    end
  end
end
return unmapped
