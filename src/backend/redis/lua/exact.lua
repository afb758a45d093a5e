-- tower-ratelimit: exact arithmetic beyond 2^53, for the sliding window
-- counter only (included when a policy has one).

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
-- A product below 2^53 is exact as it is (a new client's window has no
-- previous count: the product is 0).
local function mul_div(a, b, c)
  if a * b < 9007199254740992 then return idiv(a * b, c) end
  local q = math.floor(a * b / c)
  while q > 0 and not product_le(q, c, a, b) do q = q - 1 end
  while product_le(q + 1, c, a, b) do q = q + 1 end
  return q
end

-- ceil(a * b / c), exactly.
local function mul_div_ceil(a, b, c)
  if a * b < 9007199254740992 then return ceil_div(a * b, c) end
  local q = mul_div(a, b, c)
  if product_le(q, c, a, b) and not product_le(a, b, q, c) then q = q + 1 end
  return q
end
