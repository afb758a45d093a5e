-- A shared capacity of requests in flight: the same steps as
-- src/algorithm/fair_flight.rs. KEYS[1] is a hash (`w` the active
-- weights, `r` the places held for tenants, `n` the last permit's number,
-- `t<tenant>` = "in_flight:weight:seen:peak:peak_at:share" each), KEYS[2] the active
-- tenants by when they were last seen, KEYS[3] the permits in flight
-- ("<tenant>:<n>") by when their lease ends. Every number is an integer
-- in microseconds (integers.lua comes first).
--
-- ARGV[1] is the operation: 'acquire' (ARGV: threshold, active_for,
-- max_tenants, tenant, weight, lease, now) or 'release'
-- (ARGV: permit, active_for, lease, now). `now` is '' for Redis's TIME.
local H, Z, P = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local function time(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function tenant(id)
  local v = redis.call('HGET', H, 't' .. id)
  if not v then return nil end
  local f, w, seen, peak, peak_at, share = string.match(v, '^(%d+):(%d+):(%d+):(%d+):(%d+):(%d+)$')
  return { in_flight = tonumber(f), weight = tonumber(w), seen = tonumber(seen),
    peak = tonumber(peak), peak_at = tonumber(peak_at), share = tonumber(share) }
end
local function store(id, t)
  redis.call('HSET', H, 't' .. id, num(t.in_flight) .. ':' .. num(t.weight) .. ':' .. num(t.seen)
    .. ':' .. num(t.peak) .. ':' .. num(t.peak_at) .. ':' .. num(t.share))
end
-- The places held for a tenant: what it keeps (its peak and one more,
-- within its share) less what it uses.
local function held_for(t)
  return math.max(math.min(t.peak + 1, t.share) - t.in_flight, 0)
end
-- A tenant using its peak holds it still; a peak not held for active_for
-- falls to what it uses.
local function settle(t, now, active_for)
  if t.in_flight >= t.peak then
    t.peak_at = now
  elseif t.peak_at + active_for < now then
    t.peak = t.in_flight
    t.peak_at = now
  end
end
local function reached(t, n, now)
  if n >= t.peak then
    t.peak = n
    t.peak_at = now
  end
end
local held = tonumber(redis.call('HGET', H, 'r') or '0')
-- A permit ends: its tenant has one fewer in flight, and was seen now.
local function ended(permit, now, active_for)
  if redis.call('ZREM', P, permit) == 0 then return end
  local id = string.match(permit, '^(%x+):')
  local t = tenant(id)
  if not t then return end
  local was_held = held_for(t)
  settle(t, now, active_for)
  if t.in_flight > 0 then t.in_flight = t.in_flight - 1 end
  t.seen = now
  redis.call('ZADD', Z, num(now), id)
  store(id, t)
  held = held - was_held + held_for(t)
end
local function keep(lease, active_for)
  local ttl = math.max(ceil_div(math.max(lease, active_for) * 2, 1000), 1)
  redis.call('PEXPIRE', H, ttl)
  redis.call('PEXPIRE', Z, ttl)
  redis.call('PEXPIRE', P, ttl)
end

if op == 'release' then
  local active_for, lease, now = tonumber(ARGV[3]), tonumber(ARGV[4]), time(ARGV[5])
  ended(ARGV[2], now, active_for)
  redis.call('HSET', H, 'r', num(held))
  keep(lease, active_for)
  return { 1 }
end

local threshold = tonumber(ARGV[2])
local active_for = tonumber(ARGV[3])
local max_tenants = tonumber(ARGV[4])
local id = ARGV[5]
local weight = math.min(math.max(tonumber(ARGV[6]), 1), 1000)
local lease = tonumber(ARGV[7])
local now = time(ARGV[8])

-- Permits whose lease ended (a server that stopped without giving them
-- back) end now, 64 at most.
for _, permit in ipairs(redis.call('ZRANGEBYSCORE', P, '-inf', '(' .. num(now), 'LIMIT', 0, 64)) do
  ended(permit, now, active_for)
end
local weights = tonumber(redis.call('HGET', H, 'w') or '0')
-- Tenants not seen for longer than active_for leave, oldest first, 64 at
-- most; one with a request in flight stays, seen again now.
local idle = redis.call('ZRANGEBYSCORE', Z, '-inf', '(' .. num(now - active_for), 'LIMIT', 0, 64)
for _, gone in ipairs(idle) do
  local t = tenant(gone)
  if t and t.in_flight > 0 then
    t.seen = now
    store(gone, t)
    redis.call('ZADD', Z, num(now), gone)
  else
    if t then
      weights = weights - t.weight
      held = held - held_for(t)
    end
    redis.call('HDEL', H, 't' .. gone)
    redis.call('ZREM', Z, gone)
  end
end
local count = redis.call('ZCARD', Z)
local known = tenant(id)
local overflow = 0
if not known and count >= max_tenants then
  id = string.rep('f', 32)
  known = tenant(id)
  overflow = 1
end
local t = known or { in_flight = 0, weight = 0, seen = now, peak = 0, peak_at = now, share = 0 }
weights = weights - t.weight + weight
t.weight = weight
t.seen = now
redis.call('ZADD', Z, num(now), id)
local was_held = held_for(t)
settle(t, now, active_for)
local active = count
if not known then active = count + 1 end

local in_flight = redis.call('ZCARD', P)
local share = math.max(idiv(threshold * weight, weights), 1)
t.share = share
local within_share = t.in_flight < share
local others_hold = held - was_held
local admitted, permit = 0, 0
if in_flight < threshold and (within_share or in_flight + others_hold < threshold) then
  admitted = 1
  t.in_flight = t.in_flight + 1
  if within_share then reached(t, t.in_flight, now) end
  permit = redis.call('HINCRBY', H, 'n', 1)
  redis.call('ZADD', P, num(now + lease), id .. ':' .. num(permit))
elseif within_share then
  reached(t, t.in_flight + 1, now)
end
held = others_hold + held_for(t)
store(id, t)
redis.call('HSET', H, 'w', num(weights), 'r', num(held))
keep(lease, active_for)
return { admitted, share, active, permit, overflow }
