-- Deletes a node from the registry (after its sessions were unmapped),
-- with whatever its expiry lists still name. Its number stays known
-- (node_addresses): replicas remember it for good, and it is never reused.
-- KEYS[1] node hash, KEYS[2] nodes zset, KEYS[3] placeable zset.
-- ARGV: prefix, address.
local prefix, addr = ARGV[1], ARGV[2]
local number = redis.call('HGET', prefix .. 'node_numbers', addr)
if number then
  local seconds_key = prefix .. 'expiring:' .. number
  for _, second in ipairs(redis.call('ZRANGE', seconds_key, 0, -1)) do
    redis.call('DEL', expiring_key(prefix, number, second))
  end
  redis.call('DEL', seconds_key)
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], addr)
redis.call('ZREM', KEYS[3], addr)
return 0
