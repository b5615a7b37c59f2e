-- wrk script: POST /press over a fixed set of sessions (sticky, existing
-- after the first round), the hot path of the balancer.
-- wrk -t2 -c64 -d10s -s bench/press.lua http://127.0.0.1:8000
local sessions = tonumber(os.getenv("SESSIONS") or "1000")
local counter = 0
request = function()
  counter = counter + 1
  local body = string.format('{"session_id":"bench-%d"}', counter % sessions)
  return wrk.format("POST", "/press", { ["Content-Type"] = "application/json" }, body)
end
response = function(status, headers, body)
  if status ~= 200 then
    io.stderr:write("status " .. status .. ": " .. body .. "\n")
  end
end
