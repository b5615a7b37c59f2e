-- Raises a registered node's fencing epoch (KEYS[1], its hash) to ARGV[1];
-- never lowers it.
if redis.call('EXISTS', KEYS[1]) == 1 and
   (tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0) < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1])
end
return 0
