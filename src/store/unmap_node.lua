-- Drops every session still mapped to a node (after its /clean, or before a
-- recovered node is wiped); their next press restores them from the archive.
-- A session already moved elsewhere is left alone. O(sessions of the node):
-- its expiry lists name every session placed on it (and some that left).
-- KEYS[1] node hash, KEYS[2] placeable zset.  ARGV: prefix, address.
-- Returns the dropped ids.
local prefix, addr = ARGV[1], ARGV[2]
local number = redis.call('HGET', prefix .. 'node_numbers', addr)
local dropped = {}
if number then
  local seconds_key = prefix .. 'expiring:' .. number
  for _, second in ipairs(redis.call('ZRANGE', seconds_key, 0, -1)) do
    local list = expiring_key(prefix, number, second)
    for _, id in ipairs(redis.call('LRANGE', list, 0, -1)) do
      local key = mapping_key(prefix, id)
      local value = redis.call('HGET', key, id)
      if value and unpack_mapping(value) == number then
        redis.call('HDEL', key, id)
        dropped[#dropped + 1] = id
      end
    end
    redis.call('DEL', list)
  end
  redis.call('DEL', seconds_key)
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'sessions', 0)
end
if redis.call('ZSCORE', KEYS[2], addr) then
  redis.call('ZADD', KEYS[2], 0, addr)
end
return dropped
