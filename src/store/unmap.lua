-- Applies a clean to the groups of the ids named (one group per call on a
-- cluster, every group at once on a single Redis): the sessions named as leaving are
-- unmapped from node ARGV[2] (with their index entries, so the group's
-- count of the node stays exact); the id/base pairs still on the node take
-- their new base. A session mapped elsewhere is left alone, so running
-- this twice changes nothing the second time.
-- KEYS: the node's indexes in those groups (its lists and an earlier
-- release's zsets) and the buckets of the ids.
-- ARGV: the node lock's key ('' on a cluster, where the caller checked it)
-- and its holder's token, key prefix, number, count of leaving ids L, L ids,
-- id/base pairs.
-- Returns the ids unmapped; nothing changes if the lock is another's.
if ARGV[1] ~= '' and redis.call('GET', ARGV[1]) ~= ARGV[2] then
  return redis.error_reply('LOCKLOST the node lock is held by another operation')
end
local prefix, number, n = ARGV[3], ARGV[4], tonumber(ARGV[5])
local unmapped = {}
for i = 6, 5 + n do
  local id = ARGV[i]
  local key, due, expiring = session_keys(prefix, id, number)
  local value = redis.call('HGET', key, id)
  if value and unpack_mapping(value) == number then
    redis.call('HDEL', key, id)
    unmapped[#unmapped + 1] = id
    drop_index_entry(due, expiring, id)
  elseif redis.call('ZREM', expiring, id) == 0 and redis.call('LPOS', due, id, 'MAXLEN', 64) then
    -- Not the node's: a stray (left by a placement that moved the session
    -- off the node when it failed, or by an earlier release), dropped
    -- where it is cheap to find (a repeated clean must not scan whole
    -- lists); drop_strays.lua drops the rest after a sweep's walk.
    redis.call('LREM', due, 1, id)
  end
end
for i = 6 + n, #ARGV, 2 do
  local id = ARGV[i]
  local key = session_keys(prefix, id, number)
  local value = redis.call('HGET', key, id)
  if value then
    local on, _, exp = unpack_mapping(value)
    if on == number then
      redis.call('HSET', key, id, number .. ':' .. ARGV[i + 1] .. ':' .. exp)
    end
  end
end
return unmapped
