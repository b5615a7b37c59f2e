-- Drops index entries that the sweep's walk (due.lua) found without a
-- mapping to their node: each is checked again here, atomically, and an
-- entry is dropped only while no mapping of its id to the node stands, so
-- this needs no lock. The first entry of the id from the list's head goes,
-- where the walk found it.
-- KEYS: the node's indexes in the groups of the ids and the ids' buckets
-- (one group per call on a cluster, every group at once on one Redis).
-- ARGV: key prefix, the node's number, the ids.
-- Returns how many entries were dropped.
local prefix, number = ARGV[1], ARGV[2]
local dropped = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local bucket, due = session_keys(prefix, id, number)
  local value = redis.call('HGET', bucket, id)
  if not (value and unpack_mapping(value) == number) then
    dropped = dropped + redis.call('LREM', due, 1, id)
  end
end
return dropped
