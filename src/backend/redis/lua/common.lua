-- tower-ratelimit: shared helpers. Every number here is an integer below
-- 2^53, which Lua's doubles hold exactly; division is floored exactly.

local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end

-- Exact products and quotients beyond 2^53, for the sliding window counter:
-- x * y as three base-2^26 limbs (hi, mid, lo), exact for x, y < 2^47.
local LIMB = 67108864

local function mul3(x, y)
  local x1 = math.floor(x / LIMB)
  local x0 = x - x1 * LIMB
  local y1 = math.floor(y / LIMB)
  local y0 = y - y1 * LIMB
  local lo = x0 * y0
  local mid = x1 * y0 + x0 * y1
  local hi = x1 * y1
  local carry = math.floor(lo / LIMB)
  lo = lo - carry * LIMB
  mid = mid + carry
  carry = math.floor(mid / LIMB)
  return hi + carry, mid - carry * LIMB, lo
end

-- Whether x * y <= u * v, exactly.
local function product_le(x, y, u, v)
  local a1, a2, a3 = mul3(x, y)
  local b1, b2, b3 = mul3(u, v)
  if a1 ~= b1 then return a1 < b1 end
  if a2 ~= b2 then return a2 < b2 end
  return a3 <= b3
end

-- floor(a * b / c), exactly, for a, b, c < 2^47 and a result below 2^47.
local function mul_div(a, b, c)
  local q = math.floor(a * b / c)
  while q > 0 and not product_le(q, c, a, b) do q = q - 1 end
  while product_le(q + 1, c, a, b) do q = q + 1 end
  return q
end

-- ceil(a * b / c), exactly.
local function mul_div_ceil(a, b, c)
  local q = mul_div(a, b, c)
  if product_le(q, c, a, b) and not product_le(a, b, q, c) then q = q + 1 end
  return q
end

local function num(x)
  return string.format('%.0f', x)
end

-- An outcome: retry (0 allowed, -1 never, else microseconds, at least 1),
-- units remaining (0 to limit), microseconds until fully reset.
local function allowed(limit, remaining, reset)
  return { 0, math.min(math.max(remaining, 0), limit), reset }
end

local function denied(retry, limit, remaining, reset)
  return { math.max(retry, 1), math.min(math.max(remaining, 0), limit), reset }
end

local function never(limit, remaining, reset)
  return { -1, math.min(math.max(remaining, 0), limit), reset }
end

-- Milliseconds a key lives for state that matters for `us` microseconds:
-- rounded up, so a key never vanishes before its state stops mattering.
-- With an explicit `now` (tests replaying a trace, where virtual time is not
-- real time) keys live a minute longer; expired state is ignored anyway.
local ttl_slack_ms = 0

local function ttl_ms(us)
  return num(ceil_div(us, 1000) + ttl_slack_ms)
end

-- Fixed-size state: "expires_at v1 [v2]" in one string key, gone when expired.
local function read_state(key)
  local s = redis.call('GET', key)
  if not s then return 0, 0, 0 end
  local e, a, b = string.match(s, '^(%d+) (%d+) ?(%d*)$')
  return tonumber(e) or 0, tonumber(a) or 0, tonumber(b) or 0
end

local function write_state(key, now, e, a, b)
  if e <= now then
    redis.call('DEL', key)
    return
  end
  local value = num(e) .. ' ' .. num(a)
  if b then value = value .. ' ' .. num(b) end
  redis.call('SET', key, value, 'PX', ttl_ms(e - now))
end
