-- Placement on a cluster, in the session's group: create the mapping on
-- the node the replica chose from its view (store/view.rs) unless the
-- session has one. This check-and-set is
-- the only place a mapping is created, and it runs in the one slot that
-- holds the session's mapping: however many replicas place one id at
-- once, one mapping stands. A mapping to ARGV[5] (a node the caller saw
-- fail) does not stand: it is dropped and replaced.
--
-- The group's exact count of a node's sessions is the size of its index
-- (KEYS[3], a list the session is appended to): a mapping and its index
-- entry come and go together.
--
-- A node a replica's view still offers after it left `placeable` (on a
-- cluster the node is chosen from a view that may be a moment old:
-- store/view.rs) is refused once it is closed in this group (KEYS[7]):
-- every operation that moves a node's sessions off it closes it in every
-- group before it reads the node's indexes, so no session is mapped to it
-- behind that read.
--
-- KEYS[1] the session's bucket, KEYS[2] the group's epoch, KEYS[3] the
-- chosen node's index in the group, KEYS[4] and KEYS[5] the stale node's
-- index and the zset index an earlier release kept for it (any key of the
-- group when there is none; the list is written only when the session is
-- placed anew on that very node, see `leave_failed_node`), KEYS[6] the
-- chosen node's zset index, KEYS[7] the numbers of the nodes closed to new
-- sessions in the group.
-- ARGV: group prefix, id, number, base, expires_at_ms, stale number (''),
-- how the session is indexed (`index_mode`, which view.lua read: '0' a
-- dated entry in the list, '1' the zset, '2' a plain id in the list).
-- Returns {1, number, base, exp, replaced} when created (replaced: 1 if a
-- mapping to the stale node was dropped), {0, number, base, exp, 0} for
-- the mapping that stood, {-1} while the group is not complete (its
-- primary forgot it), {-3} when the chosen node is closed here.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
local id, stale = ARGV[2], ARGV[6]
local current = redis.call('HGET', KEYS[1], id)
local number, base, exp
if current then
  number, base, exp = unpack_mapping(current)
  if number and number ~= stale then
    return {0, tonumber(number), tonumber(base), tonumber(exp), 0}
  end
end
if redis.call('SISMEMBER', KEYS[7], ARGV[3]) == 1 then
  return {-3}
end
local replaced = 0
if current then
  if number then
    if number == ARGV[3] then
      -- Placed anew on the node it was on: its old entry goes (else the
      -- list would count the session twice).
      drop_index_entry(KEYS[4], KEYS[5], id, exp)
    else
      leave_failed_node(KEYS[5], id)
    end
    replaced = 1
  end
  redis.call('HDEL', KEYS[1], id)
end
redis.call('HSET', KEYS[1], id, ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5])
if ARGV[7] == '1' then
  redis.call('ZADD', KEYS[6], ARGV[5], id)
elseif ARGV[7] == '2' then
  redis.call('RPUSH', KEYS[3], id)
else
  redis.call('RPUSH', KEYS[3], dated_entry(id, ARGV[5]))
end
return {1, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), replaced}
