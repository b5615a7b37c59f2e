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
-- KEYS[1] the session's mapping bucket, KEYS[2] placeable zset (up nodes by
-- active sessions), KEYS[3] registry epoch.  ARGV: prefix, session id, base,
-- expires_at_ms, stale node, preferred node ('' for least sessions).
-- Returns {node, base, expires_at_ms, created(0|1)}, false when no node is
-- up, or {'', 0, 0, -1} while the registry is not complete.
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {'', 0, 0, -1}
end
local prefix, id, base, exp, stale = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local current = redis.call('HGET', KEYS[1], id)
if current then
  local number, cur_base, cur_exp = unpack_mapping(current)
  local addr = number and redis.call('HGET', prefix .. 'node_addresses', number)
  if addr and addr ~= stale then
    return {addr, cur_base, cur_exp, 0}
  end
  -- Mapped to the stale node (or to nothing Redis knows): drop it.
  if addr then
    if redis.call('EXISTS', prefix .. 'node:' .. addr) == 1 then
      redis.call('HINCRBY', prefix .. 'node:' .. addr, 'sessions', -1)
    end
    if redis.call('ZSCORE', KEYS[2], addr) then
      redis.call('ZINCRBY', KEYS[2], -1, addr)
    end
  end
  redis.call('HDEL', KEYS[1], id)
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
local number = redis.call('HGET', prefix .. 'node_numbers', node)
if not number then
  return redis.error_reply('node ' .. node .. ' has no number (registered by an older version)')
end
local second = second_of(exp)
redis.call('HSET', KEYS[1], id, number .. ':' .. base .. ':' .. exp)
redis.call('RPUSH', expiring_key(prefix, number, second), id)
redis.call('ZADD', prefix .. 'expiring:' .. number, second, second)
redis.call('ZINCRBY', KEYS[2], 1, node)
redis.call('HINCRBY', prefix .. 'node:' .. node, 'sessions', 1)
return {node, base, exp, 1}
