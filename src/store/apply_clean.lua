-- Applies the outcome of a node's /clean + fold to the session mappings, in
-- one step: expired sessions are unmapped (counts kept exact); live sessions
-- still on the node take their new base (their node count restarted at 0).
-- A session no longer mapped to this node is left alone.
-- KEYS[1] node hash, KEYS[2] node_sessions set, KEYS[3] expiry zset,
-- KEYS[4] placeable zset.
-- ARGV: prefix, address, number of expired ids E, E ids, then id/base pairs.
-- Returns the number of sessions unmapped.
local prefix, addr, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local unmapped = 0
for i = 4, 3 + n do
  local id = ARGV[i]
  local key = prefix .. 'session:' .. id
  if redis.call('HGET', key, 'node') == addr then
    redis.call('DEL', key)
    redis.call('ZREM', KEYS[3], id)
    redis.call('SREM', KEYS[2], id)
    unmapped = unmapped + 1
  end
end
if unmapped > 0 then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'sessions', -unmapped)
  end
  if redis.call('ZSCORE', KEYS[4], addr) then
    redis.call('ZINCRBY', KEYS[4], -unmapped, addr)
  end
end
for i = 4 + n, #ARGV, 2 do
  local key = prefix .. 'session:' .. ARGV[i]
  if redis.call('HGET', key, 'node') == addr then
    redis.call('HSET', key, 'base', ARGV[i + 1])
  end
end
return unmapped
