-- Sets field ARGV[1] of a registered node (KEYS[1], its hash) to ARGV[2];
-- a node that is gone is not recreated.
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
return 0
