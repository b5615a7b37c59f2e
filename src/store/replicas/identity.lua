-- The identity of the server holding KEYS[1] (the control slot's or a
-- session group's identity key; on a cluster, the primary that serves its
-- slot): its `run_id`, new at every start and on every failover. With
-- ARGV[1] 'keep', records it there. Returns what is kept (or '') and the
-- server's own.
local current = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if ARGV[1] == 'keep' then
  redis.call('SET', KEYS[1], current)
end
return {redis.call('GET', KEYS[1]) or '', current}
