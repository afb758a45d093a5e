-- Sliding window counter: state "expires_at previous current", where the
-- current window started at expires_at - 2W. Mirrors
-- algorithm/sliding_window.rs, whose exact test
--   previous * (W - e) + (current + cost) * W <= limit * W
-- is, in whole units, weight <= limit - current - cost, where
-- weight = ceil(previous * (W - e) / W): so no product is ever needed whole.

local function sw_counts(key, now, w)
  local e, previous, current = read_state(key)
  local start = idiv(now, w) * w
  if e <= now then return start, 0, 0 end
  local state_start = math.max(e - 2 * w, 0)
  local gap = start - state_start
  if gap <= 0 then return state_start, previous, current end
  if gap == w then return start, current, 0 end
  return start, 0, 0
end

-- The previous window's count weighted by its overlap, rounded up.
local function sw_weight(now, w, start, previous)
  return mul_div_ceil(previous, w - math.max(now - start, 0), w)
end

local function sw_reset(now, w, start, previous, current)
  if current > 0 then return math.max(start + 2 * w - now, 0) end
  if previous > 0 then return math.max(start + w - now, 0) end
  return 0
end

local function sw_offset(w, previous, room)
  if previous == 0 or room >= previous then return 0 end
  return w - mul_div(room, w, previous)
end

local function sw_check(key, now, cost, limit, w)
  local start, previous, current = sw_counts(key, now, w)
  local weight = sw_weight(now, w, start, previous)
  local free = limit - current - weight
  if cost > limit then
    return never(limit, free, sw_reset(now, w, start, previous, current))
  end
  if weight <= limit - current - cost then
    return allowed(limit, free - cost, sw_reset(now, w, start, previous, current + cost))
  end
  local retry_at
  local room = limit - current - cost
  if room >= 0 then
    retry_at = start + sw_offset(w, previous, room)
  else
    retry_at = start + w + sw_offset(w, current, limit - cost)
  end
  return denied(retry_at - now, limit, free, sw_reset(now, w, start, previous, current))
end

local function sw_consume(key, now, cost, limit, w)
  local start, previous, current = sw_counts(key, now, w)
  write_state(key, now, start + 2 * w, previous, math.min(current + cost, limit), true)
end

-- Give back units: from the current window, then the previous one.
local function sw_refund(key, now, units, w)
  local start, previous, current = sw_counts(key, now, w)
  local from_current = math.min(units, current)
  local from_previous = math.min(units - from_current, previous)
  write_state(key, now, start + 2 * w, previous - from_previous, current - from_current, true)
end
