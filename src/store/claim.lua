-- Placement, step two, in the session's group: create the mapping on the
-- node reserve.lua chose unless the session has one. This check-and-set is
-- the only place a mapping is created, and it runs in the one slot that
-- holds the session's mapping: however many replicas place one id at
-- once, one mapping stands. A mapping to ARGV[5] (a node the caller saw
-- fail) does not stand: it is dropped and replaced.
--
-- The group's exact count of a node's sessions is the size of its index
-- (KEYS[3]): a mapping and its index entry come and go together.
--
-- KEYS[1] the session's bucket, KEYS[2] the group's epoch, KEYS[3] the
-- chosen node's index in the group, KEYS[4] the stale node's index (any
-- key of the group when there is none).
-- ARGV: group prefix, id, number, base, expires_at_ms, stale number ('').
-- Returns {1, number, base, exp, replaced} when created (replaced: 1 if a
-- mapping to the stale node was dropped), {0, number, base, exp, 0} for
-- the mapping that stood, {-1} while the group is not complete (its
-- primary forgot it).
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
local id, stale = ARGV[2], ARGV[6]
local current = redis.call('HGET', KEYS[1], id)
local replaced = 0
if current then
  local number, base, exp = unpack_mapping(current)
  if number and number ~= stale then
    return {0, tonumber(number), tonumber(base), tonumber(exp), 0}
  end
  if number then
    replaced = redis.call('ZREM', KEYS[4], id)
  end
  redis.call('HDEL', KEYS[1], id)
end
redis.call('HSET', KEYS[1], id, ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[5], id)
return {1, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), replaced}
