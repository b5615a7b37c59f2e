-- Sets (ARGV[1] = 'set') or moves by a delta (ARGV[1] = 'add') the
-- active-session counts of registered nodes, keeping the placeable zset in
-- step; never below zero. The exact counts live in the groups (groups.rs
-- tallies them); these are their sum, for placement and for the admin.
-- KEYS[1] placeable, KEYS[2] counts, KEYS[3] weights.
-- ARGV: mode, then address/value pairs.
local add = ARGV[1] == 'add'
for i = 2, #ARGV, 2 do
  set_count(KEYS[1], KEYS[2], KEYS[3], ARGV[i], tonumber(ARGV[i + 1]), add)
end
return 0
