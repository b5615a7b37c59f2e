-- Placement, step one, in the control slot: choose the node for each of a
-- batch of new sessions and count it there at once, so concurrent
-- placements spread. Placements asked for at the same time on this replica
-- go together (store/placement.rs), so the control slot runs one script
-- for many new sessions: the one primary that holds it caps the cluster's
-- new-session rate much later. A node is the placement's preferred
-- node when the caller's strategy chose one that is still up (and not the
-- stale node, one the caller saw fail), else the up node with the fewest
-- active sessions per unit of weight; each choice sees the counts of the
-- ones before it. Step two (claim.lua) creates the mapping in the
-- session's own slot; if the session had one already, the caller gives
-- the count back, and if it never does (it died in between), the next
-- tally of the groups (groups.rs) corrects the count.
--
-- Nothing is placed while the registry epoch is missing: Redis forgot its
-- data and the registry is being rebuilt (the nodes still hold live counts
-- that must be archived first).
--
-- KEYS[1] placeable (up nodes by active sessions), KEYS[2] registry epoch,
-- KEYS[3] counts, KEYS[4] node_numbers, KEYS[5] weights, KEYS[6]
-- earlier_release, KEYS[7] plain_entries.  ARGV: two for each placement,
-- its stale node and its preferred node ('' for none).
-- Returns one answer per placement: {node, number, stale node's number or
-- '', how the claim indexes the session (`index_mode`: 0 dated in the
-- list, 1 in the zset, 2 plain in the list, while a replica of an earlier
-- release that reads them so serves)}, false when no node is up,
-- {'', -1, '', 0} while the registry is not complete, {'', -2, '', 0} when
-- the chosen node has no number (registered by an older release).
local answers = {}
local complete = redis.call('EXISTS', KEYS[2]) == 1
local counter = batch_counter(KEYS[1], KEYS[3], KEYS[5], KEYS[4])
local mode = index_mode(KEYS[6], KEYS[7])
for i = 1, #ARGV / 2 do
  local stale, preferred = ARGV[2 * i - 1], ARGV[2 * i]
  local node = complete and choose_node(KEYS[1], stale, preferred)
  local number = node and counter.number(node)
  if not complete then
    answers[i] = {'', -1, '', 0}
  elseif not node then
    answers[i] = false
  elseif not number then
    answers[i] = {'', -2, '', 0}
  else
    counter.one_more(node)
    local stale_number = ''
    if stale ~= '' then
      stale_number = counter.number(stale) or ''
    end
    answers[i] = {node, tonumber(number), stale_number, mode}
  end
end
counter.settle()
return answers
