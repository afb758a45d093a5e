-- tower-ratelimit: integer arithmetic. Every number here is an integer
-- below 2^53, which Lua's doubles hold exactly; division is floored
-- exactly.

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

-- An integer as text ('%d' formats it as one: far cheaper than '%.0f').
local function num(x)
  return string.format('%d', x)
end

