-- Drops every session still mapped to a node (after its /clean, or before a
-- recovered node is wiped); their next press restores them from the archive.
-- A session already moved elsewhere is left alone. O(sessions of the node).
-- KEYS[1] node_sessions set, KEYS[2] node hash, KEYS[3] expiry zset,
-- KEYS[4] placeable zset.  ARGV: prefix, address.  Returns the dropped ids.
local ids = redis.call('SMEMBERS', KEYS[1])
local dropped = {}
for _, id in ipairs(ids) do
  local key = ARGV[1] .. 'session:' .. id
  if redis.call('HGET', key, 'node') == ARGV[2] then
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[3], id)
    dropped[#dropped + 1] = id
  end
end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'sessions', 0)
end
if redis.call('ZSCORE', KEYS[4], ARGV[2]) then
  redis.call('ZADD', KEYS[4], 0, ARGV[2])
end
return dropped
