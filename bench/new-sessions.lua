-- wrk script: every press a new session id (placement: fold + place).
--   wrk -t1 -c64 -d10s -s bench/new-sessions.lua http://127.0.0.1:8000
-- done() prints the same RESULT line as press.lua.
local counter = 0
local prefix

function init(args)
  math.randomseed(os.time())
  prefix = string.format("new-%d-%d-", os.time(), math.random(1e9))
end

function request()
  counter = counter + 1
  local id = prefix .. counter
  return wrk.format("POST", "/press",
    { ["Content-Type"] = "application/json", ["X-Session-Id"] = id },
    '{"session_id":"' .. id .. '"}')
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT rps=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f errors=%d\n",
    summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000,
    e.connect + e.read + e.write + e.status + e.timeout))
end
