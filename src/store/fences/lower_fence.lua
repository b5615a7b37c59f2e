-- Lowers node ARGV[1]'s fence if it is still the one raised with seq
-- ARGV[2], unless a journal waits on the node (KEYS[3]): then the fence
-- stays, stale at once if it is not the journal's own, so the next sweep
-- finishes the journal. KEYS[1] fences, KEYS[2] the fence's acks.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and string.match(v, '^(%d+):') == ARGV[2] then
  local journal = redis.call('GET', KEYS[3])
  if not journal then
    redis.call('HDEL', KEYS[1], ARGV[1])
  else
    local ok, decoded = pcall(cjson.decode, journal)
    local of = ARGV[2]
    if ok and type(decoded) == 'table' and tonumber(decoded.seq) then
      of = string.format('%d', decoded.seq)
    end
    if of ~= ARGV[2] then
      redis.call('HSET', KEYS[1], ARGV[1], of .. ':0:clean')
    end
  end
end
redis.call('DEL', KEYS[2])
return 0
