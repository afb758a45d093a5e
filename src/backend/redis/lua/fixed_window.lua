-- Fixed window counter: state "window_end used". Mirrors algorithm/fixed_window.rs.

local function fw_current(key, now, w)
  local e, used = read_state(key)
  if e > now then return e, used end
  return (idiv(now, w) + 1) * w, 0
end

local function fw_check(key, now, cost, limit, w)
  local e, used = fw_current(key, now, w)
  -- Microseconds until reset: none while nothing is used.
  local reset = 0
  if used > 0 then reset = e - now end
  if cost > limit then return never(limit, limit - used, reset) end
  if used + cost <= limit then
    if used + cost > 0 then reset = e - now end
    return allowed(limit, limit - used - cost, reset)
  end
  return denied(e - now, limit, limit - used, reset)
end

local function fw_consume(key, now, cost, limit, w)
  local e, used = fw_current(key, now, w)
  write_state(key, now, e, math.min(used + cost, limit))
end

-- Give back units: they leave the count while its window lasts.
local function fw_refund(key, now, units)
  local e, used = read_state(key)
  if e <= now then return end
  write_state(key, now, e, math.max(used - units, 0))
end
