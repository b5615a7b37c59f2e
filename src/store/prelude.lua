-- Shared by the placement scripts and every script that touches session
-- mappings (prepended by `with_prelude` in store/mod.rs, where the
-- layout is described).

-- A session's keys, given by their places in KEYS (store/sessions/unmap.rs,
-- `SessionKeys`, works them out from SHA-1 of the id, as groups.rs lays
-- them out): its mapping's bucket and its node's list in its group.
local function session_keys(bucket_at, index_at)
  return KEYS[tonumber(bucket_at)], KEYS[tonumber(index_at)]
end

-- An entry of a node's list: `{end, ms}\t{id}`, the session's end before
-- its id, so the sweep's walk (store/sessions/walk.rs) reads when a session ends
-- from the list alone. Ids hold no control character, a tab included.
local function dated_entry(id, expires_at)
  return expires_at .. '\t' .. id
end

-- The id of a list entry and its end (a number).
local function parse_entry(entry)
  local ends, id = string.match(entry, '^(%-?%d+)\t(.*)$')
  return id, tonumber(ends)
end

-- Takes `id`, which ends at `expires_at` (from its mapping), out of its
-- node's list in its group: the first entry from the head, where a sweep
-- or a failover finds it (`LREM` stops there). Returns 1 if it was found.
local function drop_index_entry(due, id, expires_at)
  return redis.call('LREM', due, 1, dated_entry(id, expires_at))
end

-- Indexes a session just mapped to node `number` in its group (`group`,
-- its key prefix): a dated entry at the tail of the node's list.
local function index_new_session(group, number, id, expires_at)
  redis.call('RPUSH', group .. 'due:' .. number, dated_entry(id, expires_at))
end

-- What a session's base was folded against (`Sessions::unmaps_seen`): its
-- group's epoch and how often a session of the group was unmapped. A
-- placement whose base was folded before the last unmap of its group may
-- miss clicks that unmap's clean archived (model.md:
-- base_guard), and is refused.
local function unmaps_seen(group)
  return (redis.call('GET', group .. 'epoch') or '') .. ':' .. (redis.call('GET', group .. 'unmaps') or '0')
end

-- Counts an unmap in the group of `bucket` (a mapping's bucket key,
-- `{group}mappings:{gghh}`), once per script run and group (`bumped`).
local function count_unmap(bucket, bumped)
  local group = string.sub(bucket, 1, #bucket - #'mappings:0000')
  if not bumped[group] then
    bumped[group] = true
    redis.call('INCR', group .. 'unmaps')
  end
end

-- A mapping is '{node number}:{base}:{expires at, ms}'; returns the three
-- parts as strings (nil if the value is not one).
local function unpack_mapping(value)
  return string.match(value, '^(%d+):(%-?%d+):(%-?%d+)$')
end

-- A node's score in `placeable`: its active sessions per unit of weight,
-- as HAProxy's leastconn weighs its servers, so a node of weight 3 takes
-- three new sessions for every one of a node of weight 1. Registration
-- writes every node's weight; a missing one (a node deleted meanwhile)
-- weighs 1.
local function load_of(weights, addr, count)
  return count / (tonumber(redis.call('HGET', weights, addr)) or 1)
end

-- Sets (or, with `add`, moves by `value`) the active-session count of a
-- registered node (one with a count: never recreates a deleted node's),
-- never below zero, and scores it again in `placeable` if it is up there.
-- Returns false for a node that is not registered.
local function set_count(placeable, counts, weights, addr, value, add)
  local current = redis.call('HGET', counts, addr)
  if not current then
    return false
  end
  local count = value
  if add then
    count = tonumber(current) + value
  end
  if count < 0 then
    count = 0
  end
  redis.call('HSET', counts, addr, count)
  if redis.call('ZSCORE', placeable, addr) then
    redis.call('ZADD', placeable, load_of(weights, addr, count), addr)
  end
  return true
end

-- The counting of one batch of placements (place.lua): a
-- node's count is read once a batch and kept here as it moves, each move
-- scores the node again in `placeable` from its count (so the next choice
-- of the batch sees it, exactly as it would after a script of its own),
-- and the counts are written once per node when the batch ends
-- (`settle`). Weights and node numbers are read once a batch too.
local function batch_counter(placeable, counts, weights, numbers)
  local weight_of, number_of, count_of, moved = {}, {}, {}, {}
  local counter = {}
  local function weight(node)
    if not weight_of[node] then
      weight_of[node] = tonumber(redis.call('HGET', weights, node)) or 1
    end
    return weight_of[node]
  end
  -- The node's number, false if it has none.
  function counter.number(node)
    if number_of[node] == nil then
      number_of[node] = redis.call('HGET', numbers, node)
    end
    return number_of[node]
  end
  -- The node's count now, false if it has none.
  function counter.count(node)
    if count_of[node] == nil then
      count_of[node] = tonumber(redis.call('HGET', counts, node)) or false
    end
    return count_of[node] and count_of[node] + (moved[node] or 0)
  end
  local function move(node, by)
    moved[node] = (moved[node] or 0) + by
    redis.call('ZADD', placeable, (counter.count(node) or moved[node]) / weight(node), node)
  end
  -- One more session on `node`, an up node.
  function counter.one_more(node)
    move(node, 1)
  end
  -- One session fewer on `node` (never below zero); rescored only if it
  -- is placeable.
  function counter.one_less(node)
    local count = counter.count(node)
    if count and count > 0 then
      moved[node] = (moved[node] or 0) - 1
      if redis.call('ZSCORE', placeable, node) then
        redis.call('ZADD', placeable, (count - 1) / weight(node), node)
      end
    end
  end
  function counter.settle()
    for node, by in pairs(moved) do
      if by ~= 0 then
        redis.call('HINCRBY', counts, node, by)
      end
    end
  end
  return counter
end

-- The node a new session goes to: `preferred` (the caller's strategy's
-- choice) if it is up and not `stale` (a node the caller saw fail), else
-- the up node with the fewest active sessions per unit of weight; nil when
-- no node is up. `placeable` is the zset of up nodes scored by `load_of`.
local function choose_node(placeable, stale, preferred)
  if preferred ~= '' and preferred ~= stale and redis.call('ZSCORE', placeable, preferred) then
    return preferred
  end
  return redis.call('ZRANGE', placeable, 0, 0)[1]
end
