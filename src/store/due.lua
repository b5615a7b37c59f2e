-- The sweep's read of one node's index in one group: the sessions whose
-- life has ended by ARGV[3], from the head of the list. Reads only.
--
-- The list holds the group's sessions on the node in the order they were
-- placed. Sessions live a fixed time from their placement, so they end in
-- about that order too: the walk stops after ARGV[5] sessions that are
-- still live (one that ended behind them, placed by a replica whose clock
-- is behind, is found when they end, late by the clocks' difference).
--
-- An entry carries its session's end (`{end}\t{id}`, prelude.lua), so
-- the walk reads the list and nothing else; those it returns are checked
-- against their mappings by the caller (groups.rs), which drops the strays
-- among them. A plain id (appended by the release before, or while one of
-- its replicas serves) has its mapping read here for its end: one whose
-- mapping is gone or on another node is a stray, returned apart, for
-- drop_strays.lua, which checks each again with its keys declared (a read
-- here of a bucket that a cluster is moving can miss).
--
-- KEYS[1] the node's list in the group. ARGV: the group's key prefix
-- (`P{s:gg}`), the node's number, the end (ms), the most to return, how
-- many live sessions end the walk, the most entries to read.
-- Returns {{id, expires_at_ms, ...} from dated entries (to be checked),
-- {id, expires_at_ms, ...} from plain ids (checked), {stray id, ...}}.
local list, group, number = KEYS[1], ARGV[1], ARGV[2]
local by, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local lookahead, most = tonumber(ARGV[5]), tonumber(ARGV[6])
local dated, checked, strays, seen = {}, {}, {}, {}
local live, read, found = 0, 0, 0
local chunk = 32
while found < limit and live < lookahead and read < most do
  local entries = redis.call('LRANGE', list, read, read + chunk - 1)
  for _, entry in ipairs(entries) do
    read = read + 1
    local ends, id = string.match(entry, '^(%-?%d+)\t(.*)$')
    -- Where an ended session goes: a dated entry's end is the caller's
    -- to check, a plain id's is read (and checked) here.
    local into = dated
    if not ends then
      id, into = entry, checked
      local bucket = group .. 'mappings:' .. string.sub(redis.sha1hex(id), 1, 4)
      local value = redis.call('HGET', bucket, id)
      local on
      if value then
        on, ends = string.match(value, '^(%d+):%-?%d+:(%-?%d+)$')
      end
      if on ~= number then
        strays[#strays + 1] = id
        into = nil
      end
    end
    if into then
      if tonumber(ends) > by then
        live = live + 1
      elseif not seen[id] then
        seen[id] = true
        found = found + 1
        into[#into + 1] = id
        into[#into + 1] = ends
      end
    end
    if found >= limit or live >= lookahead or read >= most then
      break
    end
  end
  if #entries < chunk then
    break
  end
end
return {dated, checked, strays}
