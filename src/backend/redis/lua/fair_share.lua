-- A shared capacity's decision: the same steps as
-- src/algorithm/fair_share.rs, on a hash (KEYS[1]: `tat`, `w` the active
-- weights, and `t<tenant>` = "tat:weight:seen" each) and a sorted set of
-- the active tenants by when they last asked (KEYS[2]). Every number is an
-- integer in microseconds (integers.lua comes first).
local H, Z = KEYS[1], KEYS[2]
local interval = tonumber(ARGV[1])
local depth = tonumber(ARGV[2])
local active_for = tonumber(ARGV[3])
local threshold = tonumber(ARGV[4])
local max_tenants = tonumber(ARGV[5])
local limit = tonumber(ARGV[6])
local id = ARGV[7]
local weight = math.min(math.max(tonumber(ARGV[8]), 1), 1000)
local MAX_TENANT_INTERVAL = 1125899906842624 -- 2^50
local now
if ARGV[9] ~= '' then
  now = tonumber(ARGV[9])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function tenant(field)
  local v = redis.call('HGET', H, field)
  if not v then return nil end
  local tat, w = string.match(v, '^(%d+):(%d+):')
  return { tat = tonumber(tat), weight = tonumber(w) }
end

local weights = tonumber(redis.call('HGET', H, 'w') or '0')
-- Tenants idle for longer than active_for leave, oldest first, 64 at most.
local idle = redis.call('ZRANGEBYSCORE', Z, '-inf', '(' .. num(now - active_for), 'LIMIT', 0, 64)
for _, gone in ipairs(idle) do
  local t = tenant('t' .. gone)
  if t then weights = weights - t.weight end
  redis.call('HDEL', H, 't' .. gone)
  redis.call('ZREM', Z, gone)
end

local count = redis.call('ZCARD', Z)
local known = tenant('t' .. id)
if not known and count >= max_tenants then
  id = string.rep('f', 32)
  known = tenant('t' .. id)
end
local t_tat, t_weight = 0, 0
if known then t_tat, t_weight = known.tat, known.weight end
weights = weights - t_weight + weight
local active = count
if not known then active = count + 1 end
redis.call('ZADD', Z, num(now), id)

-- ceil(interval * weights / weight), at most 2^50, without a product past
-- 2^53: weights = q * weight + r.
local q = idiv(weights, weight)
local r = weights - q * weight
local tenant_interval = MAX_TENANT_INTERVAL
if q < idiv(MAX_TENANT_INTERVAL, interval) then
  tenant_interval = math.min(interval * q + ceil_div(interval * r, weight), MAX_TENANT_INTERVAL)
end
local tenant_depth = math.max(tenant_interval, idiv(depth, 2))
local capacity_tat = math.max(tonumber(redis.call('HGET', H, 'tat') or '0'), now) + interval
local filled = capacity_tat - now
local tenant_tat = math.max(t_tat, now) + tenant_interval
local within_share = tenant_tat - now <= tenant_depth
local share = math.max(idiv(limit * weight, weights), 1)
local admitted, retry_after = 0, 0
if filled > threshold then
  retry_after = filled - threshold
elseif within_share or filled <= interval then
  admitted = 1
else
  retry_after = math.min(tenant_tat - now - tenant_depth, filled - interval)
end
if admitted == 1 then
  redis.call('HSET', H, 'tat', num(capacity_tat))
  t_tat = math.min(tenant_tat, now + tenant_depth)
end
redis.call('HSET', H, 'w', num(weights), 't' .. id, num(t_tat) .. ':' .. num(weight) .. ':' .. num(now))
-- An idle capacity leaves nothing behind.
local ttl = math.max(ceil_div(active_for * 2, 1000), 1)
redis.call('PEXPIRE', H, ttl)
redis.call('PEXPIRE', Z, ttl)
return { admitted, share, retry_after, active }
