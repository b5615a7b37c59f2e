-- Placement in one step, on a single Redis (where every key is in reach of
-- one script): reserve.lua and claim.lua together, in one round trip.
-- A Redis Cluster runs the two steps apart, since the control slot and
-- the session's group are on different primaries.
--
-- KEYS[1] placeable, KEYS[2] registry epoch, KEYS[3] counts,
-- KEYS[4] node_numbers, KEYS[5] the session's bucket, KEYS[6] its group's
-- epoch, KEYS[7] weights (the chosen node's index is named here, from its
-- number, in the same group).
-- ARGV: key prefix, id, base, expires_at_ms, stale node (''), preferred
-- node (''), and a stale node number ('') that overrides the stale node's
-- (a number the standing mapping named that Redis no longer knows).
-- Returns {1, number, base, exp} when created, {0, number, base, exp} for
-- the mapping that stood, {-1} while the registry or the group is not
-- complete, false when no node is up.
if redis.call('EXISTS', KEYS[2]) == 0 or redis.call('EXISTS', KEYS[6]) == 0 then
  return {-1}
end
local prefix, id, stale, preferred = ARGV[1], ARGV[2], ARGV[5], ARGV[6]
local stale_number = false
if ARGV[7] ~= '' then
  stale_number = ARGV[7]
elseif stale ~= '' then
  stale_number = redis.call('HGET', KEYS[4], stale)
end
local current = redis.call('HGET', KEYS[5], id)
local standing = current and unpack_mapping(current)
if standing and standing ~= stale_number then
  local number, base, exp = unpack_mapping(current)
  return {0, tonumber(number), tonumber(base), tonumber(exp)}
end
local node = choose_node(KEYS[1], stale, preferred)
if not node then
  return false
end
local number = redis.call('HGET', KEYS[4], node)
if not number then
  return redis.error_reply('node ' .. node .. ' has no number (registered by an older version)')
end
if current then
  -- A mapping to the node the caller saw fail does not stand: dropped,
  -- with its index entry and its count.
  if standing then
    local _, stale_index = session_keys(prefix, id, standing)
    local counted = redis.call('HGET', KEYS[3], stale)
    if redis.call('ZREM', stale_index, id) == 1 and counted then
      local left = math.max(tonumber(counted) - 1, 0)
      redis.call('HSET', KEYS[3], stale, left)
      if redis.call('ZSCORE', KEYS[1], stale) then
        redis.call('ZADD', KEYS[1], load_of(KEYS[7], stale, left), stale)
      end
    end
  end
  redis.call('HDEL', KEYS[5], id)
end
count_one_more(KEYS[1], KEYS[3], KEYS[7], node)
local _, index = session_keys(prefix, id, number)
redis.call('HSET', KEYS[5], id, number .. ':' .. ARGV[3] .. ':' .. ARGV[4])
redis.call('ZADD', index, ARGV[4], id)
return {1, tonumber(number), tonumber(ARGV[3]), tonumber(ARGV[4])}
