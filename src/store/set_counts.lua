-- Sets (ARGV[1] = 'set') or moves by a delta (ARGV[1] = 'add') the
-- active-session counts of registered nodes, keeping the placeable zset in
-- step; never below zero. The exact counts live in the groups (groups.rs
-- tallies them); these are their sum, for placement and for the admin.
-- KEYS[1] placeable, KEYS[2] counts, KEYS[3] weights.  ARGV: mode, then
-- address/value/weight triples; a weight is recorded only where none is
-- (a node an earlier release registered): a replica's view of weights may
-- lag the admin's last change, so it never overwrites one ('' for none).
local add = ARGV[1] == 'add'
for i = 2, #ARGV, 3 do
  local addr = ARGV[i]
  -- The weight first: the node's new score is worked out from it.
  if ARGV[i + 2] ~= '' and redis.call('HEXISTS', KEYS[2], addr) == 1 then
    redis.call('HSETNX', KEYS[3], addr, ARGV[i + 2])
  end
  set_count(KEYS[1], KEYS[2], KEYS[3], addr, tonumber(ARGV[i + 1]), add)
end
return 0
