-- The sweep's read of one node's index in one group: the sessions whose
-- life has ended by ARGV[3], from the head of the list. Reads only.
--
-- The list holds the group's sessions on the node in the order they were
-- placed. Sessions live a fixed time from their placement, so they end in
-- about that order too: the walk stops after ARGV[5] sessions that are
-- still live (one that ended behind them, placed by a replica whose clock
-- is behind, is found when they end, late by the clocks' difference). It reads each entry's
-- mapping for its end, so its cost is that of the sessions that ended,
-- not of the whole list.
--
-- An entry whose mapping is gone or on another node is a stray (left by
-- an earlier release, which ended sessions without touching the list, or
-- by a placement that moved a session off a failed node): it is returned
-- apart, for drop_strays.lua, which checks each again with its keys
-- declared (a read here of a bucket that a cluster is moving can miss).
--
-- KEYS[1] the node's list in the group. ARGV: the group's key prefix
-- (`P{s:gg}`), the node's number, the end (ms), the most to return, how
-- many live sessions end the walk, the most entries to read.
-- Returns {{id, expires_at_ms, id, expires_at_ms, ...}, {stray id, ...}}.
local list, group, number = KEYS[1], ARGV[1], ARGV[2]
local by, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local lookahead, most = tonumber(ARGV[5]), tonumber(ARGV[6])
local ended, strays, seen = {}, {}, {}
local live, read = 0, 0
local chunk = 64
while #ended < 2 * limit and live < lookahead and read < most do
  local ids = redis.call('LRANGE', list, read, read + chunk - 1)
  for _, id in ipairs(ids) do
    read = read + 1
    local bucket = group .. 'mappings:' .. string.sub(redis.sha1hex(id), 1, 4)
    local value = redis.call('HGET', bucket, id)
    local on, exp
    if value then
      on, exp = string.match(value, '^(%d+):%-?%d+:(%-?%d+)$')
    end
    if on ~= number then
      strays[#strays + 1] = id
    elseif tonumber(exp) > by then
      live = live + 1
    elseif not seen[id] then
      seen[id] = true
      ended[#ended + 1] = id
      ended[#ended + 1] = exp
    end
    if #ended >= 2 * limit or live >= lookahead or read >= most then
      break
    end
  end
  if #ids < chunk then
    break
  end
end
return {ended, strays}
