-- Places a session on the up node with the fewest active sessions, atomically,
-- so concurrent first presses of one id on any replica yield one mapping.
-- If the session is mapped to ARGV[5] (a node the caller saw fail or go
-- down), that mapping is dropped first and the session placed anew; if it is
-- mapped anywhere else, that mapping wins and is returned unchanged.
--
-- The node is ARGV[6] when the caller's strategy chose one that is still up,
-- else the up node with the fewest active sessions (PLACEMENT=least-sessions).
--
-- Nothing is placed while the registry epoch is missing: Redis forgot its
-- data and the registry is being rebuilt (the nodes still hold live counts
-- that must be archived first).
--
-- KEYS[1] session hash, KEYS[2] placeable zset (up nodes by active sessions),
-- KEYS[3] expiry zset, KEYS[4] registry epoch.  ARGV: prefix, session id,
-- base, expires_at_ms, stale node, preferred node ('' for least sessions).
-- Returns {node, base, expires_at_ms, created(0|1)}, false when no node is
-- up, or {'', 0, 0, -1} while the registry is not complete.
if redis.call('EXISTS', KEYS[4]) == 0 then
  return {'', 0, 0, -1}
end
local prefix, id, base, exp, stale = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local cur = redis.call('HMGET', KEYS[1], 'node', 'base', 'exp')
if cur[1] then
  if cur[1] ~= stale then
    return {cur[1], cur[2], cur[3], 0}
  end
  redis.call('SREM', prefix .. 'node_sessions:' .. stale, id)
  if redis.call('EXISTS', prefix .. 'node:' .. stale) == 1 then
    redis.call('HINCRBY', prefix .. 'node:' .. stale, 'sessions', -1)
  end
  if redis.call('ZSCORE', KEYS[2], stale) then
    redis.call('ZINCRBY', KEYS[2], -1, stale)
  end
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[3], id)
end
local node = nil
if ARGV[6] ~= '' and ARGV[6] ~= stale and redis.call('ZSCORE', KEYS[2], ARGV[6]) then
  node = ARGV[6]
else
  node = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
end
if not node then
  return false
end
redis.call('HSET', KEYS[1], 'node', node, 'base', base, 'exp', exp)
redis.call('ZADD', KEYS[3], exp, id)
redis.call('ZINCRBY', KEYS[2], 1, node)
redis.call('HINCRBY', prefix .. 'node:' .. node, 'sessions', 1)
redis.call('SADD', prefix .. 'node_sessions:' .. node, id)
return {node, base, exp, 1}
