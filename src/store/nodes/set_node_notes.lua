-- Records why a registered node (KEYS[1], its hash) is in its state
-- (ARGV[1]) and, unless '', its instance id (ARGV[2]).
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'reason', ARGV[1])
  if ARGV[2] ~= '' then
    redis.call('HSET', KEYS[1], 'instance', ARGV[2])
  end
end
return 0
