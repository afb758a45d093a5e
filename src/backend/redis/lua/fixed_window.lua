-- Fixed window counter: state "window_end used". Mirrors algorithm/fixed_window.rs.
-- A calendar quota's windows are its periods: `cal` is Calendar::code
-- (quota/calendar.rs), 0 for none.

local DAY = 86400000000

-- Days since 1970-01-01 of a date, and back (quota/calendar.rs).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

-- The day a month starting on day `from` starts in month m of year y.
local function month_start(y, m, from)
  local ny, nm = y, m + 1
  if nm == 13 then ny, nm = y + 1, 1 end
  local first = days_from_civil(y, m, 1)
  return first + math.min(from, days_from_civil(ny, nm, 1) - first) - 1
end

-- When the period `now` falls in ends.
local function calendar_end(now, cal)
  local period = cal % 4
  local offset = (math.floor(cal / 128) - 1440) * 60000000
  local day = idiv(now + offset, DAY)
  local e
  if period == 1 then
    e = day - (day + 3) % 7 + 7
  elseif period == 3 then
    local y = civil_from_days(day)
    e = days_from_civil(y + 1, 1, 1)
  else
    local from = math.floor(cal / 4) % 32
    local y, m = civil_from_days(day)
    e = month_start(y, m, from)
    if day >= e then
      if m == 12 then y, m = y + 1, 1 else m = m + 1 end
      e = month_start(y, m, from)
    end
  end
  return e * DAY - offset
end

local function fw_current(key, now, w, cal)
  local e, used = read_state(key)
  if e > now then return e, used end
  if cal ~= 0 then return calendar_end(now, cal), 0 end
  return (idiv(now, w) + 1) * w, 0
end

local function fw_check(key, now, cost, limit, w, cal)
  local e, used = fw_current(key, now, w, cal)
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

local function fw_consume(key, now, cost, limit, w, cal)
  local e, used = fw_current(key, now, w, cal)
  write_state(key, now, e, math.min(used + cost, limit), nil, true)
end

-- Give back units: they leave the count while its window lasts.
local function fw_refund(key, now, units)
  local e, used = read_state(key)
  if e <= now then return end
  write_state(key, now, e, math.max(used - units, 0), nil, true)
end
