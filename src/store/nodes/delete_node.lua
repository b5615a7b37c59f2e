-- Deletes a node from the registry (after its sessions were unmapped and
-- its group indexes deleted). Its number stays known (node_addresses):
-- replicas remember it for good, and it is never reused.
-- KEYS[1] node hash, KEYS[2] nodes zset, KEYS[3] placeable zset, KEYS[4]
-- counts, KEYS[5] weights.  ARGV: address.
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 0
