-- Placement, step one, in the control slot: choose the node for a new
-- session and count it there at once, so concurrent placements spread.
-- The node is ARGV[2] when the caller's strategy chose one that is still
-- up (and not ARGV[1], a node the caller saw fail), else the up node with
-- the fewest active sessions per unit of weight. Step two (claim.lua) creates the mapping in
-- the session's own slot; if the session had one already, the caller
-- gives the count back, and if it never does (it died in between), the
-- next tally of the groups (groups.rs) corrects the count.
--
-- Nothing is placed while the registry epoch is missing: Redis forgot its
-- data and the registry is being rebuilt (the nodes still hold live counts
-- that must be archived first).
--
-- KEYS[1] placeable (up nodes by active sessions), KEYS[2] registry epoch,
-- KEYS[3] counts, KEYS[4] node_numbers, KEYS[5] weights.  ARGV: stale node, preferred node
-- ('' for none).
-- Returns {node, number, stale node's number or ''}, false when no node
-- is up, or {'', -1, ''} while the registry is not complete.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'', -1, ''}
end
local stale, preferred = ARGV[1], ARGV[2]
local node = choose_node(KEYS[1], stale, preferred)
if not node then
  return false
end
local number = redis.call('HGET', KEYS[4], node)
if not number then
  return redis.error_reply('node ' .. node .. ' has no number (registered by an older version)')
end
count_one_more(KEYS[1], KEYS[3], KEYS[5], node)
local stale_number = ''
if stale ~= '' then
  stale_number = redis.call('HGET', KEYS[4], stale) or ''
end
return {node, tonumber(number), stale_number}
