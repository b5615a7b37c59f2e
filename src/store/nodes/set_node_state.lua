-- Moves a node to a new state if it is in one of the expected states, keeping
-- the placeable zset (up nodes only, scored by active sessions) in step.
-- KEYS[1] node hash, KEYS[2] placeable zset, KEYS[3] counts, KEYS[4]
-- weights.  ARGV:
-- address, new state, expected states separated by commas ('' = any), and
-- '1' to refuse taking down the last up node (a verdict on timeouts alone:
-- checked here, atomically, so two replicas judging two nodes at once
-- cannot take both down).
-- KEYS[5], when given, is the node's lock and ARGV[5] its holder's token:
-- the change lands only while the operation making it holds the node.
-- Returns the previous state, false if the node is unknown or not expected,
-- or 'last' when refused.
if KEYS[5] and redis.call('GET', KEYS[5]) ~= ARGV[5] then
  return redis.error_reply('LOCKLOST the node lock is held by another operation')
end
local old = redis.call('HGET', KEYS[1], 'state')
if not old then
  return false
end
if ARGV[3] ~= '' and not string.find(',' .. ARGV[3] .. ',', ',' .. old .. ',', 1, true) then
  return false
end
if ARGV[4] == '1' and ARGV[2] == 'down' and old == 'up'
    and redis.call('ZCARD', KEYS[2]) <= 1 then
  return 'last'
end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
if ARGV[2] == 'up' then
  local count = tonumber(redis.call('HGET', KEYS[3], ARGV[1])) or 0
  redis.call('ZADD', KEYS[2], load_of(KEYS[4], ARGV[1], count), ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return old
