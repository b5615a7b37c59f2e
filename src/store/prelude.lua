-- Shared by the placement scripts and every script that touches session
-- mappings (prepended by `mapping_script` in store/mod.rs, where the
-- layout is described).

-- The bucket a session's mapping lives in and its node's index, both in
-- the session's group (`P{s:gg}`, gg the first two hex digits of
-- SHA-1(id)); the bucket is named by the first four (`mapping_bucket` in
-- groups.rs agrees, and the caller declares the same keys).
local function session_keys(prefix, id, number)
  local digest = redis.sha1hex(id)
  local group = prefix .. '{s:' .. string.sub(digest, 1, 2) .. '}'
  return group .. 'mappings:' .. string.sub(digest, 1, 4), group .. 'expiring:' .. number
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

-- Counts one more session on `node` and scores it again in `placeable`.
local function count_one_more(placeable, counts, weights, node)
  local count = redis.call('HINCRBY', counts, node, 1)
  redis.call('ZADD', placeable, load_of(weights, node, count), node)
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
