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
  local addr, value = ARGV[i], tonumber(ARGV[i + 1])
  local current = redis.call('HGET', KEYS[2], addr)
  if current then
    local count = value
    if add then
      count = tonumber(current) + value
    end
    if count < 0 then
      count = 0
    end
    redis.call('HSET', KEYS[2], addr, count)
    if ARGV[i + 2] ~= '' then
      redis.call('HSETNX', KEYS[3], addr, ARGV[i + 2])
    end
    if redis.call('ZSCORE', KEYS[1], addr) then
      redis.call('ZADD', KEYS[1], load_of(KEYS[3], addr, count), addr)
    end
  end
end
return 0
