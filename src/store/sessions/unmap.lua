-- Applies a clean to the groups of the ids named (one group per call on a
-- cluster, every group at once on a single Redis): the sessions named as leaving are
-- unmapped from node ARGV[3] (with their index entries, so the group's
-- count of the node stays exact); the id/base pairs still on the node take
-- their new base. A session mapped elsewhere, or placed anew on the node
-- after an expiry's moment, is left alone, so running this twice changes
-- nothing the second time.
-- KEYS: the node's lists in those groups and the buckets of the ids.
-- ARGV: the node lock's key ('' on a cluster, where the caller checked it)
-- and its holder's token, the node's number, the moment an expiry's leaving
-- sessions ended by ('' for a removal or failover: all of the node's
-- leave), count of leaving ids L; then
-- L times an id (or a list entry) and its keys' places (`session_keys`);
-- then id, new base and the id's keys' places for each session re-based.
-- Returns the ids unmapped; nothing changes if the lock is another's.
if ARGV[1] ~= '' and redis.call('GET', ARGV[1]) ~= ARGV[2] then
  return redis.error_reply('LOCKLOST the node lock is held by another operation')
end
local number, ended_by, n = ARGV[3], tonumber(ARGV[4]) or math.huge, tonumber(ARGV[5])
local unmapped, bumped = {}, {}
for i = 6, 5 + 3 * n, 3 do
  -- An id, or an entry as the node's list holds it (a failover names
  -- what it read there, strays included).
  local entry, id = ARGV[i], ARGV[i]
  if string.find(entry, '\t', 1, true) then
    id = parse_entry(entry)
  end
  local key, due = session_keys(ARGV[i + 1], ARGV[i + 2])
  local value = redis.call('HGET', key, id)
  local on, _, exp
  if value then
    on, _, exp = unpack_mapping(value)
  end
  -- A session placed anew on the node since its clean began ends later
  -- than the clean's moment: not this clean's to take, even when the
  -- script runs again (model.md: unmap_takes_its_own).
  if on == number and tonumber(exp) <= ended_by then
    redis.call('HDEL', key, id)
    count_unmap(key, bumped)
    unmapped[#unmapped + 1] = id
    drop_index_entry(due, id, exp)
  elseif redis.call('LPOS', due, entry, 'MAXLEN', 64) then
    -- Not the node's: a stray (left by a placement that moved the session
    -- off the node when it failed), dropped where it is cheap to find (a
    -- repeated clean must not scan whole lists); the sweep drops the rest
    -- once their end has passed.
    redis.call('LREM', due, 1, entry)
  end
end
for i = 6 + 3 * n, #ARGV, 4 do
  local id = ARGV[i]
  local key = session_keys(ARGV[i + 2], ARGV[i + 3])
  local value = redis.call('HGET', key, id)
  if value then
    local on, _, exp = unpack_mapping(value)
    if on == number then
      redis.call('HSET', key, id, number .. ':' .. ARGV[i + 1] .. ':' .. exp)
    end
  end
end
return unmapped
