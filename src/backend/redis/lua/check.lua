-- The decision for one request under a whole policy, in one call.
--
-- KEYS: per limit, its state key (two for a sliding log: entries, sum).
-- KEYS, after the limits': with a penalty box, its strikes and bans keys.
-- ARGV: as script.rs's CHECK_ARGS names them: now (microseconds, or ""
--       for the server's TIME), cost, the mode (0/1: whether denials count;
--       's' to settle: cost is then actual - reserved; 'l<want>:<back>' to
--       lease; 'r'/'n' and a permit to release/renew it), the penalty box
--       (strikes, or 0 for none; within, ban, max ban in microseconds);
--       under the packed format the client's field; then per limit:
--       algorithm, limit, window, interval.
--       Algorithms: 1 fixed window, 2 sliding log, 3 sliding window, 4 GCRA.
-- Reply: per limit, {retry, remaining, reset} (see common.lua), then the
-- ban in force in microseconds (0: none), then the permit taken (0: none;
-- for a lease, the units granted). All limits
-- allow, and the request is counted in all; or it is counted in none
-- (unless denied requests count). Mirrors backend/memory: Store::check.

local cost = {{number}}(ARGV[2])
local count_denied = ARGV[3] == '1'
local penalty = nil
if ARGV[4] ~= '0' then
  penalty = {
    strikes = {{number}}(ARGV[4]),
    within = {{number}}(ARGV[5]),
    ban = {{number}}(ARGV[6]),
    max_ban = {{number}}(ARGV[7]),
    strikes_key = KEYS[#KEYS - 1],
    bans_key = KEYS[#KEYS],
  }
end

local limits = {}
local k = 1
-- The first limit's arguments: after the fixed ones (script.rs's
-- CHECK_ARGS, the one table of this layout) and the packed format's field.
local a = {{first_limit_arg}}
while ARGV[a] do
  local l = {
    alg = {{number}}(ARGV[a]),
    limit = {{number}}(ARGV[a + 1]),
    w = {{number}}(ARGV[a + 2]),
    t = {{number}}(ARGV[a + 3]),
    key = KEYS[k],
  }
  -- 5: requests in flight, kept as a sliding log whose permits leave
  -- early when released.
  l.concurrent = l.alg == 5
  if l.concurrent then l.alg = 2 end
  if l.alg == 2 then
    l.sum = KEYS[k + 1]
    k = k + 2
  else
    k = k + 1
  end
  limits[#limits + 1] = l
  a = a + 4
end

local function check(l, c)
  if l.alg == 1 then return fw_check(l.key, now, c, l.limit, l.w, l.t) end
  if l.alg == 2 then return log_check(l.key, l.sum, now, c, l.limit, l.w) end
  if l.alg == 3 then return sw_check(l.key, now, c, l.limit, l.w) end
  return gcra_check(l.key, now, c, l.limit, l.t)
end

local function consume(l)
  if l.alg == 1 then return fw_consume(l.key, now, cost, l.limit, l.w, l.t) end
  if l.alg == 2 then return log_consume(l.key, l.sum, now, cost, l.limit, l.w) end
  if l.alg == 3 then return sw_consume(l.key, now, cost, l.limit, l.w) end
  return gcra_consume(l.key, now, cost, l.limit, l.t)
end

-- Each limit's state after `change` (a function of the limit) ran on it,
-- with the reply's tail: no ban, and `permit` (0: none).
local function after_each(change)
  local reply = {}
  for i, l in ipairs(limits) do
    change(l)
    local o = check(l, 0)
    reply[3 * i - 2] = o[1]
    reply[3 * i - 1] = o[2]
    reply[3 * i] = o[3]
  end
  reply[3 * #limits + 1] = 0
  reply[3 * #limits + 2] = 0
  return reply
end

-- Releasing ('r') or renewing ('n') the permit named after it, of cost, on
-- each limit of requests in flight; then each limit's state, and the
-- renewed permit (0 if it was lost).
local mode = string.sub(ARGV[3], 1, 1)
if mode == 'r' or mode == 'n' then
  local permit = tonumber(string.sub(ARGV[3], 2))
  local held = true
  local reply = after_each(function(l)
    if not l.concurrent then return end
    local found = log_release(l.key, l.sum, now, permit, cost, l.w)
    if found and mode == 'n' then log_consume(l.key, l.sum, now, cost, l.limit, l.w) end
    held = held and found
  end)
  if mode == 'n' and held then reply[3 * #limits + 2] = now end
  return reply
end

-- Give back units to every rate limit (not to limits of requests in
-- flight). Made only when settling or leasing: a check does without.
local refund
if mode == 's' or mode == 'l' then
  refund = function(units)
    for _, l in ipairs(limits) do
      if not l.concurrent then
        if l.alg == 1 then fw_refund(l.key, now, units)
        elseif l.alg == 2 then log_refund(l.key, l.sum, now, units, l.w)
        elseif l.alg == 3 then sw_refund(l.key, now, units, l.w)
        else gcra_refund(l.key, now, units, l.t) end
      end
    end
  end
end

-- Settling (count_denied is 's'): cost is actual - reserved. Give back a
-- negative one to every limit; charge a positive one all of it, whatever
-- the limits say and past their capacity (a debt the next requests wait
-- out: the work is done); report each limit's state. A permit is given
-- back when its request ends, not settled. The consumptions run uncapped:
-- a sliding window's count is still kept to 32 bits, as in Rust.
if ARGV[3] == 's' then
  if cost < 0 then refund(-cost) end
  return after_each(function(l)
    if cost > 0 and not l.concurrent then
      if l.alg == 1 then fw_consume(l.key, now, cost, math.huge, l.w, l.t)
      elseif l.alg == 2 then log_consume(l.key, l.sum, now, cost, math.huge, l.w)
      elseif l.alg == 3 then sw_consume(l.key, now, cost, 4294967295, l.w)
      else gcra_consume(l.key, now, cost, math.huge, l.t) end
    end
  end)
end

-- Leasing ('l<want>:<back>'): give back the units an ended lease did not
-- spend, then take `want` units from every limit at once, or only this
-- request's cost when `want` does not fit. The decision below is then
-- made for what is taken, and the units granted end the reply.
local granted = 0
if mode == 'l' then
  local want, back = string.match(ARGV[3], '^l(%d+):(%d+)$')
  want, back = tonumber(want), tonumber(back)
  if back > 0 then refund(back) end
  local fits = want > cost
  for _, l in ipairs(limits) do
    if fits and check(l, want)[1] ~= 0 then fits = false end
  end
  if fits then cost = want end
  granted = cost
end

-- A ban in force answers for every limit, which are not looked at.
if penalty then
  local until_ = banned_until(penalty.bans_key, now, penalty.max_ban)
  if until_ then
    local reply = {}
    for i = 1, #limits do
      reply[3 * i - 2] = until_ - now
      reply[3 * i - 1] = 0
      reply[3 * i] = until_ - now
    end
    reply[3 * #limits + 1] = until_ - now
    reply[3 * #limits + 2] = 0
    return reply
  end
end

local outcomes = {}
local all_allowed = true
for i, l in ipairs(limits) do
  outcomes[i] = check(l, cost)
  if outcomes[i][1] ~= 0 then all_allowed = false end
end

local commit = cost > 0 and (all_allowed or count_denied)
if commit then
  for _, l in ipairs(limits) do consume(l) end
end

if not all_allowed then
  -- Report what each limit holds now, keeping each verdict.
  for i, l in ipairs(limits) do
    if outcomes[i][1] == 0 or commit then
      local now_state = check(l, 0)
      outcomes[i] = { outcomes[i][1], now_state[2], now_state[3] }
    end
  end
end

-- A strike is a denial of a real request (the memory backend's full table
-- has no counterpart here).
local ban = 0
if penalty and cost > 0 and not all_allowed then
  ban = strike(penalty.strikes_key, penalty.bans_key, now, penalty)
end

-- An admission under a limit of requests in flight holds a permit, named
-- by now.
local permit = 0
if commit and all_allowed then
  for _, l in ipairs(limits) do
    if l.concurrent then permit = now end
  end
  -- A lease takes no permit (policies with requests in flight are not
  -- leased): its last number is the units granted.
  if mode == 'l' then permit = granted end
end

local reply = {}
reply[3 * #limits + 1] = ban
reply[3 * #limits + 2] = permit
for i, o in ipairs(outcomes) do
  reply[3 * i - 2] = o[1]
  reply[3 * i - 1] = o[2]
  reply[3 * i] = o[3]
end
return reply
