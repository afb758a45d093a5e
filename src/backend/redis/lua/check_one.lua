-- The driver for the common case: a check under one fixed-size limit (a
-- fixed window, a sliding window or a bucket), no penalty box, denials not
-- counted. Same KEYS, ARGV and reply as check.lua, without its tables.

local now = tonumber(ARGV[1])
if now then
  ttl_slack_ms = 60000
else
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local cost = tonumber(ARGV[2])
local alg, limit = tonumber(ARGV[8]), tonumber(ARGV[9])
local w, t = tonumber(ARGV[10]), tonumber(ARGV[11])
local key = KEYS[1]

local o
if alg == 4 then o = gcra_check(key, now, cost, limit, t)
elseif alg == 1 then o = fw_check(key, now, cost, limit, w)
else o = sw_check(key, now, cost, limit, w) end
if o[1] == 0 and cost > 0 then
  if alg == 4 then gcra_consume(key, now, cost, limit, t)
  elseif alg == 1 then fw_consume(key, now, cost, limit, w)
  else sw_consume(key, now, cost, limit, w) end
end
-- No ban, no permit.
return { o[1], o[2], o[3], 0, 0 }
