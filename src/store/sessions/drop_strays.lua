-- Drops list entries that the sweep found without a mapping to their node
-- (groups.rs, for an entry whose end has passed): each is checked again
-- here, atomically, and an entry is dropped only while no mapping of its
-- id to the node that ends when it says stands, so this needs no lock.
-- The first such entry from the list's head goes. It is looked for only as
-- far as where the walk saw it (entries leave the list, none is put before
-- another, so it can only have come nearer the head): one that another
-- replica's clean took meanwhile costs that much to miss, not the list.
-- KEYS: the node's indexes in the groups of the ids and the ids' buckets
-- (one group per call on a cluster, every group at once on one Redis).
-- ARGV: the node's number, then per entry: the entry, how far from the
-- head the walk saw it (0: not known, the whole list) and its keys'
-- places (`session_keys`).
-- Returns how many entries were dropped.
local number = ARGV[1]
local dropped = 0
for i = 2, #ARGV, 4 do
  local entry, seen_at = ARGV[i], tonumber(ARGV[i + 1])
  local id, ends = parse_entry(entry)
  local bucket, due = session_keys(ARGV[i + 2], ARGV[i + 3])
  local value = redis.call('HGET', bucket, id)
  local on, _, exp
  if value then
    on, _, exp = unpack_mapping(value)
  end
  local stray = on ~= number or tonumber(exp) ~= ends
  if stray and (seen_at == 0 or redis.call('LPOS', due, entry, 'MAXLEN', seen_at)) then
    dropped = dropped + redis.call('LREM', due, 1, entry)
  end
end
return dropped
