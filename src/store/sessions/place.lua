-- Placement on a single Redis (where every key is in reach of one script):
-- the choice (a cluster's replica makes it from its view: store/sessions/view.rs)
-- and claim.lua together, for a batch of sessions in one round
-- trip. Placements asked for at the same time on this replica go together
-- (store/sessions/placement.rs); each is decided exactly as if it ran alone, one
-- after the other, so a batch changes the cost, not the outcome. A Redis
-- Cluster runs the two steps apart, since the control slot and the
-- session's group are on different primaries.
--
-- KEYS[1] placeable, KEYS[2] registry epoch, KEYS[3] counts,
-- KEYS[4] node_numbers, KEYS[5] weights; then for the i-th placement
-- (from 1) KEYS[4 + 2i] its bucket and KEYS[5 + 2i] its group's epoch
-- (the chosen node's list is named here, from the group's prefix and the
-- node's number, see `index_new_session`).
-- ARGV: eight for each placement: its group's key prefix (`P{s:gg}`), id,
-- base, expires_at_ms, stale node (''), preferred node (''), a stale
-- node number ('') that overrides the stale node's (a number the standing
-- mapping named that Redis no longer knows), and what the base was folded
-- against (`unmaps_seen`; '' for a base that was not folded).
-- Returns one answer per placement: {1, number, base, exp} when created,
-- {0, number, base, exp} for the mapping that stood, {-1} while the
-- registry or the group is not complete, {-2} when the group unmapped a
-- session since the base was folded (fold again), false when no node is
-- up.
local registry_complete = redis.call('EXISTS', KEYS[2]) == 1
local counter = batch_counter(KEYS[1], KEYS[3], KEYS[5], KEYS[4])

local function place(bucket, group_epoch, group, id, base, expires_at, stale, preferred, unknown, seen)
  if not registry_complete or redis.call('EXISTS', group_epoch) == 0 then
    return {-1}
  end
  local stale_number = false
  if unknown ~= '' then
    stale_number = unknown
  elseif stale ~= '' then
    stale_number = counter.number(stale)
  end
  -- The node first, as a cluster's replica chooses it before claim.lua
  -- runs: both answer as protocol::placement::place (the model's Place).
  local node = choose_node(KEYS[1], stale, preferred)
  if not node then
    return false
  end
  local current = redis.call('HGET', bucket, id)
  local standing = current and unpack_mapping(current)
  if standing and standing ~= stale_number then
    local number, kept_base, exp = unpack_mapping(current)
    return {0, tonumber(number), tonumber(kept_base), tonumber(exp)}
  end
  if seen ~= '' and seen ~= unmaps_seen(group) then
    return {-2}
  end
  local number = counter.number(node)
  if current then
    -- A mapping to the node the caller saw fail does not stand: dropped,
    -- with its count. Its entry stays in the failed node's list, a stray
    -- (finding it there would read the list up to it on every such press,
    -- all at once when a busy node fails); the failover's unmapping drops
    -- it (unmap.lua), as does the sweep once its end has passed
    -- (drop_strays.lua). Only a session placed anew on that very node
    -- loses its old entry here: the list would count it twice.
    if standing == number then
      local _, _, exp = unpack_mapping(current)
      drop_index_entry(group .. 'due:' .. number, id, exp)
    end
    if standing then
      counter.one_less(stale)
    end
    redis.call('HDEL', bucket, id)
  end
  counter.one_more(node)
  redis.call('HSET', bucket, id, number .. ':' .. base .. ':' .. expires_at)
  index_new_session(group, number, id, expires_at)
  return {1, tonumber(number), tonumber(base), tonumber(expires_at)}
end

local answers = {}
for i = 1, (#KEYS - 5) / 2 do
  local a = 8 * (i - 1)
  answers[i] = place(KEYS[4 + 2 * i], KEYS[5 + 2 * i], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
    ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8])
end
counter.settle()
return answers
