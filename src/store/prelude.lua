-- Shared by the placement scripts and every script that touches session
-- mappings (prepended by `mapping_script` in store/mod.rs, where the
-- layout is described).

-- A session's keys, given by their places in KEYS (store/sessions.rs,
-- `SessionKeys`, works them out from SHA-1 of the id, as groups.rs lays
-- them out): its mapping's bucket, and its node's two indexes in its
-- group, declared one after the other: the list this release appends to
-- (`due:n`) and the zset an earlier release wrote (`expiring:n`, read and
-- emptied beside the list, written only while `earlier_release` is set:
-- `index_new_session`).
local function session_keys(bucket_at, indexes_at)
  local indexes = tonumber(indexes_at)
  return KEYS[tonumber(bucket_at)], KEYS[indexes], KEYS[indexes + 1]
end

-- An entry of a node's list: `{end, ms}\t{id}`, the session's end before
-- its id, so the sweep's walk (due.lua) reads when a session ends from the
-- list alone. Ids hold no control character (a tab included), so the tab
-- tells these from the plain ids a release before this one appended (and
-- this one appends while such a replica serves: `index_new_session`).
local function dated_entry(id, expires_at)
  return expires_at .. '\t' .. id
end

-- The id of a list entry and its end (a number; nil for a plain id).
local function parse_entry(entry)
  local ends, id = string.match(entry, '^(%-?%d+)\t(.*)$')
  if ends then
    return id, tonumber(ends)
  end
  return entry, nil
end

-- A session leaving a node that failed, one press at a time (place.lua,
-- claim.lua): its entry leaves the zset an earlier release kept, but in
-- the node's list it stays, a stray, since finding it there would read
-- the list up to it on every such press, all at once when a busy node
-- fails. The failover's unmapping, which walks the node's lists in order,
-- drops it (unmap.lua); so does the sweep once its end has passed (the
-- walk returns it as ended, its mapping says otherwise: drop_strays.lua).
local function leave_failed_node(expiring, id)
  redis.call('ZREM', expiring, id)
end

-- What a script that takes many entries out (unmap.lua) learns once per
-- key rather than once per entry: whether an earlier release's zset is
-- there at all, and whether a list's head is a dated entry (a list of the
-- release before holds plain ids, and only a list whose head is dated is
-- asked for a dated entry first). Hints of cost only: an entry is found
-- whatever they say. Not for a script that also adds entries.
local function index_hints()
  local zsets, dated, hints = {}, {}, {}
  function hints.has_zset(key)
    if zsets[key] == nil then
      zsets[key] = redis.call('EXISTS', key) == 1
    end
    return zsets[key]
  end
  function hints.head_dated(key)
    if dated[key] == nil then
      local head = redis.call('LINDEX', key, 0)
      dated[key] = head and string.find(head, '\t', 1, true) ~= nil or false
    end
    return dated[key]
  end
  return hints
end

-- Takes `id`, which ends at `expires_at` (from its mapping), out of its
-- node's index in its group: from the zset if an earlier release put it
-- there, else from the list, dated or plain (the first entry from the
-- head: an older entry of the id, left by a release that did not take it
-- out, goes before the live one). An `LREM` that misses reads the whole
-- list, so without `hints` (index_hints) each form is looked for near the
-- head first, where a sweep or a failover finds it.
-- Returns 1 if an entry was found.
local function drop_index_entry(due, expiring, id, expires_at, hints)
  if (not hints or hints.has_zset(expiring)) and redis.call('ZREM', expiring, id) == 1 then
    return 1
  end
  local dated = dated_entry(id, expires_at)
  if hints and hints.head_dated(due) then
    if redis.call('LREM', due, 1, dated) == 1 then
      return 1
    end
  elseif redis.call('LPOS', due, dated, 'MAXLEN', 64) then
    return redis.call('LREM', due, 1, dated)
  elseif redis.call('LPOS', due, id, 'MAXLEN', 64) then
    return redis.call('LREM', due, 1, id)
  elseif redis.call('LREM', due, 1, dated) == 1 then
    return 1
  end
  return redis.call('LREM', due, 1, id)
end

-- Indexes a session just mapped to node `number` in its group (`group`,
-- its key prefix), as `mode` says (place.lua and view.lua read it from the marks
-- the heartbeats keep, store/fences.rs): 0, a dated entry at the tail of
-- the node's list; 2, while a replica of the release before serves (it
-- reads lists of plain ids), a plain id there; 1, while a replica of an
-- earlier release serves (it reads only zsets), in the zset by the
-- session's end, so that its cleans and sweeps see the session. Either way
-- a session is in one index only (but for a session an earlier replica
-- places anew on the node it was listed on), and the two sizes add up to
-- the group's count of the node, strays aside.
local function index_new_session(group, number, id, expires_at, mode)
  if mode == 1 then
    redis.call('ZADD', group .. 'expiring:' .. number, expires_at, id)
  elseif mode == 2 then
    redis.call('RPUSH', group .. 'due:' .. number, id)
  else
    redis.call('RPUSH', group .. 'due:' .. number, dated_entry(id, expires_at))
  end
end

-- How new sessions are indexed now (see `index_new_session`), from the
-- marks `earlier_release` and `plain_entries`.
local function index_mode(earlier_release, plain_entries)
  if redis.call('EXISTS', earlier_release) == 1 then
    return 1
  elseif redis.call('EXISTS', plain_entries) == 1 then
    return 2
  end
  return 0
end

-- A mapping is '{node number}:{base}:{expires at, ms}'; returns the three
-- parts as strings (nil if the value is not one).
local function unpack_mapping(value)
  return string.match(value, '^(%d+):(%-?%d+):(%-?%d+)$')
end

-- A node's score in `placeable`: its active sessions per unit of weight,
-- as HAProxy's leastconn weighs its servers, so a node of weight 3 takes
-- three new sessions for every one of a node of weight 1. A node with no
-- weight in `weights` (registered by an earlier release, before the
-- sweep's tally wrote it) weighs 1.
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
