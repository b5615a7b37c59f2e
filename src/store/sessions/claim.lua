-- Placement on a cluster, in the session's group: create the mapping on
-- the node the replica chose from its view (store/sessions/view.rs) unless the
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
-- store/sessions/view.rs) is refused once it is closed in this group (KEYS[7]):
-- every operation that moves a node's sessions off it closes it in every
-- group before it reads the node's indexes, so no session is mapped to it
-- behind that read.
--
-- KEYS[1] the session's bucket, KEYS[2] the group's epoch, KEYS[3] the
-- chosen node's list in the group, KEYS[4] the numbers of the nodes
-- closed to new sessions in the group.
-- ARGV: group prefix, id, number, base, expires_at_ms, stale number (''),
-- what the base was folded against (`unmaps_seen`, place.lua; '' for a
-- base that was not folded).
-- Returns {1, number, base, exp, replaced} when created (replaced: 1 if a
-- mapping to the stale node was dropped), {0, number, base, exp, 0} for
-- the mapping that stood, {-1} while the group is not complete (its
-- primary forgot it), {-2} when the group unmapped a session since the
-- base was folded, {-3} when the chosen node is closed here.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1}
end
-- A closed node is refused first, as if the replica's view had not
-- offered it: it chooses again. The choice comes first in place.lua and
-- `protocol::placement::place` too (with no node to choose, nothing is
-- placed, even where a mapping stands).
if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 1 then
  return {-3}
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
if ARGV[7] ~= '' and ARGV[7] ~= unmaps_seen(ARGV[1]) then
  return {-2}
end
local replaced = 0
if current then
  if number then
    -- The stale node's entry stays, a stray (place.lua says why), unless
    -- the session is placed anew on that very node: the list would count
    -- it twice.
    if number == ARGV[3] then
      drop_index_entry(KEYS[3], id, exp)
    end
    replaced = 1
  end
  redis.call('HDEL', KEYS[1], id)
end
redis.call('HSET', KEYS[1], id, ARGV[3] .. ':' .. ARGV[4] .. ':' .. ARGV[5])
redis.call('RPUSH', KEYS[3], dated_entry(id, ARGV[5]))
return {1, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), replaced}
