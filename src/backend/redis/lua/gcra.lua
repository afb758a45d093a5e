-- GCRA (also the token bucket and the leaky bucket): state "tat 0".
-- Mirrors algorithm/gcra.rs.

local function gcra_check(key, now, cost, capacity, t)
  local tat = read_state(key)
  local in_use = math.max(tat - now, 0)
  local free = capacity - ceil_div(in_use, t)
  if cost > capacity then return never(capacity, free, in_use) end
  local after = in_use + cost * t
  local span = capacity * t
  if after <= span then return allowed(capacity, capacity - ceil_div(after, t), after) end
  return denied(after - span, capacity, free, in_use)
end

local function gcra_consume(key, now, cost, capacity, t)
  local tat = read_state(key)
  local in_use = math.max(tat - now, 0) + cost * t
  write_state(key, now, now + math.min(in_use, capacity * t), 0)
end

local function gcra_refund(key, now, units, t)
  local tat = read_state(key)
  local in_use = math.max(math.max(tat - now, 0) - units * t, 0)
  write_state(key, now, now + in_use, 0)
end
