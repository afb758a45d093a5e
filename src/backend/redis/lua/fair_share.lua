-- A shared capacity's decision: the same steps as
-- src/algorithm/fair_share/, on a hash (KEYS[1]) and a sorted set of the
-- active tenants by when they last asked (KEYS[2]). The hash holds `tat`
-- (the capacity's), `rtat` (the critical reserve's), `ck` `cc` `cp` (the
-- critical requests admitted past their shares, by span of the depth's
-- windows), `gtat` (the graduations'), `w` (the active weights), the
-- newcomers' place (`pm` members, `pw` weights, `ps` since, `pk` `pc` `pp`
-- its requests by window) and `t<tenant>` = "tat:weight:seen:level:at:
-- standing:since:pooled_weight:k:current:previous:0" each (level and
-- at: how far ahead of its share it asks; standing 1: a newcomer, 2: a
-- tenant of its own; tat up to what it keeps of its unused share behind
-- now; the last field, once what it saved apart, written 0 and not read,
-- so that servers of either version read each other's states). Every
-- number is an integer in microseconds (integers.lua comes first); a
-- field that does not parse counts as absent.
local H, Z = KEYS[1], KEYS[2]
local interval = tonumber(ARGV[1])
local active_for = tonumber(ARGV[2])
local threshold = tonumber(ARGV[3])
local headroom = tonumber(ARGV[4])
local max_tenants = tonumber(ARGV[5])
local limit = tonumber(ARGV[6])
local window = tonumber(ARGV[7])
local id = ARGV[8]
local weight = math.min(math.max(tonumber(ARGV[9]), 1), 1000)
local critical = ARGV[10] == '1'
local reserve_interval = tonumber(ARGV[11])
local reserve_depth = tonumber(ARGV[12])
local depth = tonumber(ARGV[14])
local trusted = ARGV[15] == '1'
local MAX_TENANT_INTERVAL = 1125899906842624 -- 2^50
local SMALL_POOL, BUSY_SAMPLE, BUSY_TIMES, POOL_GROWTH_WINDOWS, MAX_POOL_WEIGHT = 16, 8, 4, 8, 10000
local now
if ARGV[13] ~= '' then
  now = tonumber(ARGV[13])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function field(name)
  return tonumber(redis.call('HGET', H, name) or '0') or 0
end
local function tenant(key)
  local v = redis.call('HGET', H, key)
  if not v then return nil end
  local f = {}
  for n in string.gmatch(v, '%d+') do f[#f + 1] = tonumber(n) end
  if #f ~= 12 or (f[6] ~= 1 and f[6] ~= 2) then return nil end
  return { tat = f[1], weight = f[2], level = f[4], at = f[5], standing = f[6],
    since = f[7], pooled_weight = f[8], k = f[9], current = f[10], previous = f[11] }
end

local weights = field('w')
local pm, pw, ps = field('pm'), field('pw'), field('ps')
local pool = { k = field('pk'), current = field('pc'), previous = field('pp') }
local reserved = { k = field('ck'), current = field('cc'), previous = field('cp') }
-- Counted over the depth's whole windows, at least one.
local reserved_windows = math.max(ceil_div(depth, window), 1)
local reserved_span = window * reserved_windows
-- Tenants idle for longer than active_for leave, oldest first, 64 at most.
local idle = redis.call('ZRANGEBYSCORE', Z, '-inf', '(' .. num(now - active_for), 'LIMIT', 0, 64)
for _, gone in ipairs(idle) do
  local t = tenant('t' .. gone)
  if t then
    weights = weights - t.weight
    if t.standing == 1 then
      pm = pm - 1
      pw = pw - t.pooled_weight
    end
  end
  redis.call('HDEL', H, 't' .. gone)
  redis.call('ZREM', Z, gone)
end

local count = redis.call('ZCARD', Z)
local own = tenant('t' .. id)
if not own and count >= max_tenants then
  id = string.rep('f', 32)
  own = tenant('t' .. id)
end
local active = count
if not own then
  active = count + 1
  own = { tat = 0, weight = 0, level = 0, at = 0, standing = 0, since = 0,
    pooled_weight = 0, k = 0, current = 0, previous = 0 }
end
weights = weights - own.weight + weight
own.weight = weight
redis.call('ZADD', Z, num(now), id)

-- Requests by whole windows: one more at now; the last window's, times 1024.
local function count_one(c, span)
  local k = idiv(now, span)
  -- A caller whose clock was read before another's counts in the window
  -- it finds.
  if k > c.k then
    if k == c.k + 1 then c.previous = c.current else c.previous = 0 end
    c.current = 0
    c.k = k
  end
  c.current = c.current + 1
end
local function last_window(c, span)
  local k = idiv(now, span)
  local current, previous = 0, 0
  if k <= c.k then
    current, previous = c.current, c.previous
  elseif k == c.k + 1 then
    previous = c.current
  end
  local left = idiv((span - (now - k * span)) * 1024, span)
  return current * 1024 + previous * left
end

if own.standing == 0 and trusted then
  -- A trusted tenant is one of its own from its first request.
  own.standing = 2
  own.tat = now
elseif own.standing == 0 then
  own.standing = 1
  own.since = now
  if pm == 0 then ps = now end
  pm = pm + 1
elseif own.standing == 1 then
  pw = pw - own.pooled_weight
end
if own.standing == 1 then
  own.pooled_weight = weight
  pw = pw + weight
  count_one(own, window)
  count_one(pool, window)
  if now - own.since >= idiv(window, 4) then
    -- Its rate against the newcomers' mean, in doubles as the memory
    -- backend computes it.
    local function here(since) return idiv(math.min(math.max(now - since, 0), window) * 64, window) end
    local asked = last_window(own, window)
    local busy = asked >= BUSY_SAMPLE * 1024
      and asked * pm * here(ps) >= BUSY_TIMES * last_window(pool, window) * here(own.since)
    local graduated_tat = math.max(field('gtat'), now) + window
    if (pm <= SMALL_POOL or busy) and graduated_tat - now <= SMALL_POOL * window then
      redis.call('HSET', H, 'gtat', num(graduated_tat))
      own.standing = 2
      own.tat = now
      pm = pm - 1
      pw = pw - weight
    end
  end
end

-- ceil(interval * weights / w), at most 2^50, without a product past 2^53:
-- weights = q * w + r and interval = a * w + b.
local function tenant_interval(interval, weights, w)
  local q = idiv(weights, w)
  local r = weights - q * w
  if q >= idiv(MAX_TENANT_INTERVAL, interval) then return MAX_TENANT_INTERVAL end
  local a = idiv(interval, w)
  local b = interval - a * w
  return math.min(interval * q + a * r + ceil_div(b * r, w), MAX_TENANT_INTERVAL)
end
-- One request against a GCRA from tat: its time of arrival before and
-- after it (a debt counts at most the depth, a time it stood empty at most
-- behind), and whether that is within the depth.
local function pace(step, depth, tat, behind)
  local from = math.min(math.max(tat, now - behind), now + depth)
  local after = from + step
  return { from = from, tat = after, depth = depth, within = after - now <= depth }
end

local place = 0
if pm > 0 then
  place = math.min(1 + idiv(math.max(now - ps, 0), POOL_GROWTH_WINDOWS * window), pw, MAX_POOL_WEIGHT)
end
local top = weights - pw + place
-- What the shares divide: the capacity less the critical requests admitted
-- past their shares, per window over the depth's whole windows (at most
-- half of it).
local shared = interval
local r = math.min(idiv(last_window(reserved, reserved_span), reserved_windows), idiv(limit * 1024, 2))
if r > 0 then
  shared = math.max(ceil_div(window * 1024, limit * 1024 - r), interval)
  limit = idiv(limit * 1024 - r, 1024)
end
local pooled = own.standing == 1
local t_interval, share
if pooled then
  t_interval = tenant_interval(shared, top * pw, place * weight)
  share = idiv(idiv(limit * place, top) * weight, pw)
else
  t_interval = tenant_interval(shared, top, weight)
  share = idiv(limit * weight, top)
end
share = math.max(share, 1)
-- How far ahead of its share it asks is counted over two intervals, and
-- its GCRA's tolerance is as long.
local t_depth = 2 * t_interval
-- A tenant of its own keeps its unused share (the time its GCRA stood
-- empty) up to as many of its intervals as the headroom holds requests.
local behind = 0
if not pooled then behind = idiv(headroom, interval) * t_interval end
local p = pace(t_interval, t_depth, own.tat, behind)
local step = ceil_div(t_depth, 1024)
-- A GCRA of every request at the share's interval, in 1024ths of its
-- depth, at most two depths (a tenant starts one ahead), drained to now.
local level = 1024
if own.at > 0 then
  level = math.max(own.level - idiv(math.min(math.max(now - own.at, 0), 2 * t_depth), step), 0)
end
-- How far ahead of its share it asks, in 1024ths (at most one), before
-- this request counts: how far past a depth ahead; a newcomer at least a
-- third.
local ahead = math.min(math.max(level - 1024, 0), 1024)
if pooled and pm > SMALL_POOL then ahead = math.max(ahead, 341) end
own.level = math.min(level + idiv(t_interval, step), 2048)
own.at = math.max(own.at, now)
local reserve = pace(reserve_interval, reserve_depth, field('rtat'), 0)
local in_reserve = critical and not p.within and reserve_interval > 0 and reserve.within

if in_reserve then
  -- the class's threshold
elseif p.within then
  local room = idiv(headroom * ahead, 1024)
  -- A tenant spending share it left unused (its GCRA empty): at most half
  -- the headroom.
  if p.from <= now then room = math.min(room, idiv(headroom, 2)) end
  threshold = threshold - room
else
  threshold = threshold - idiv(headroom * 3, 2)
end
threshold = math.max(threshold, interval)
local capacity_tat = math.max(field('tat'), now) + interval
local filled = capacity_tat - now
local admitted = 0
if filled <= threshold then
  admitted = 1
  redis.call('HSET', H, 'tat', num(capacity_tat))
  if in_reserve then
    -- Paid by the reserve, not by the tenant's share.
    count_one(reserved, reserved_span)
    redis.call('HSET', H, 'rtat', num(reserve.tat), 'ck', num(reserved.k), 'cc', num(reserved.current),
      'cp', num(reserved.previous))
  else
    own.tat = math.min(p.tat, now + p.depth)
  end
elseif p.within then
  -- Refused within its share, a tenant loses an interval of what it kept.
  own.tat = p.from
  if p.from < now then own.tat = math.min(p.from + t_interval, now) end
end
local retry_after = math.max(filled - threshold, 0)
redis.call('HSET', H, 'w', num(weights), 'pm', num(pm), 'pw', num(pw), 'ps', num(ps),
  'pk', num(pool.k), 'pc', num(pool.current), 'pp', num(pool.previous),
  't' .. id, table.concat({ num(own.tat), num(own.weight), num(now), num(own.level),
    num(own.at), num(own.standing), num(own.since), num(own.pooled_weight), num(own.k),
    num(own.current), num(own.previous), '0' }, ':'))
-- An idle capacity leaves nothing behind.
local ttl = math.max(ceil_div(active_for * 2, 1000), 1)
redis.call('PEXPIRE', H, ttl)
redis.call('PEXPIRE', Z, ttl)
return { admitted, share, retry_after, active }
