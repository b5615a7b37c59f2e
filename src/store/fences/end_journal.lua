-- Ends the clean of journal seq ARGV[2] under the node's lock (guard.lua
-- first): raises the node's fencing epoch (KEYS[3], the node's hash) to
-- ARGV[3] unless '' or lower, and deletes the journal (KEYS[2]) if it is
-- that clean's (or does not parse). Both or neither.
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[3]) == 1 and
   (tonumber(redis.call('HGET', KEYS[3], 'epoch')) or 0) < tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[3], 'epoch', ARGV[3])
end
local journal = redis.call('GET', KEYS[2])
if journal then
  local ok, decoded = pcall(cjson.decode, journal)
  if not ok or type(decoded) ~= 'table' or not tonumber(decoded.seq)
     or string.format('%d', decoded.seq) == ARGV[2] then
    redis.call('DEL', KEYS[2])
  end
end
return 0
