-- Read only. The sessions placed on a node that expire at or before ARGV[3]
-- (every one of them when ARGV[3] is 'all'), at most ARGV[4], oldest second
-- first, each once. With ARGV[5] = 'checked', entries of sessions that left
-- the node, or were placed anew, are skipped (each placement has its own
-- entry); else they are returned too, for a caller that re-reads the
-- mappings under the node lock anyway (the sweep: half its Redis time).
-- ARGV: prefix, address, by (ms or 'all'), limit, 'checked' or ''.
-- Returns {ids, passed}: passed lists 'second:entries' of each second read
-- whole and wholly at or before ARGV[3], which the sweep may forget once
-- its sessions are archived (see forget_expiring.lua).
local prefix, addr, limit = ARGV[1], ARGV[2], tonumber(ARGV[4])
local number = redis.call('HGET', prefix .. 'node_numbers', addr)
if not number then
  return {{}, {}}
end
local by = tonumber(ARGV[3])
local max_second = '+inf'
if by then
  max_second = string.format('%d', math.floor(by / 1000))
end
local checked = ARGV[5] == 'checked'
-- Still mapped to this node, and expiring by then.
local function still_due(id)
  local value = redis.call('HGET', mapping_key(prefix, id), id)
  if not value then
    return false
  end
  local on, _, exp = unpack_mapping(value)
  return on == number and (not by or tonumber(exp) <= by)
end
local ids, passed, seen = {}, {}, {}
local seconds = redis.call('ZRANGEBYSCORE', prefix .. 'expiring:' .. number, '-inf', max_second)
for _, second in ipairs(seconds) do
  if #ids >= limit then
    break
  end
  local entries = redis.call('LRANGE', expiring_key(prefix, number, second), 0, -1)
  local whole = true
  for i, id in ipairs(entries) do
    if #ids >= limit then
      whole = false
      break
    end
    if not seen[id] then
      seen[id] = true
      if not checked or still_due(id) then
        ids[#ids + 1] = id
      end
    end
  end
  if whole and (not by or (tonumber(second) + 1) * 1000 - 1 <= by) then
    passed[#passed + 1] = second .. ':' .. #entries
  end
end
return {ids, passed}
