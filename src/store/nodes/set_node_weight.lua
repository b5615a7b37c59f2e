-- Changes a registered node's weight and scores it again in `placeable`
-- (its sessions per unit of weight, prelude.lua), so the next placement
-- already weighs it.
-- KEYS[1] node hash, KEYS[2] placeable, KEYS[3] counts, KEYS[4] weights.
-- ARGV: address, weight.
-- Returns 1, or 0 if the node is not registered.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'weight', ARGV[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  local count = tonumber(redis.call('HGET', KEYS[3], ARGV[1])) or 0
  redis.call('ZADD', KEYS[2], load_of(KEYS[4], ARGV[1], count), ARGV[1])
end
return 1
