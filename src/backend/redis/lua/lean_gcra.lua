-- The lean script of a check under one GCRA limit (also the token and the
-- leaky bucket), no penalty box, denials not counted: the most common call,
-- written out with no function of its own. Lua makes every function a
-- script defines on every call (about 1,400 instructions each, a quarter of
-- a GET), so this repeats gcra.lua's check and commit inline, and one
-- conformance proptest holds it to algorithm/gcra.rs as the others are.
-- KEYS: the state. ARGV: now (microseconds, or "" for the server's TIME),
-- cost, limit, window, interval (the lean scripts' arguments: no mode, no
-- penalty box, no algorithm code). Reply as check.lua's.

local cost, capacity, t = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local key = KEYS[1]

local tat = 0
local s = redis.call('GET', key)
-- A bare number (the compact format) needs no pattern.
if s then tat = tonumber(s) or tonumber(string.match(s, '^(%d+) %d+ ?%d*$')) or 0 end
local in_use = math.max(tat - now, 0)
-- Units free: capacity - ceil(in_use / t), exactly (see common.lua: a
-- floor that rounding took one too far up is still the right ceiling).
local q = math.floor(in_use / t)
if q * t < in_use then q = q + 1 end
local free = math.min(math.max(capacity - q, 0), capacity)
if cost > capacity then return { -1, free, in_use, 0, 0 } end
local after = in_use + cost * t
local span = capacity * t
if after > span then return { after - span, free, in_use, 0, 0 } end
if cost > 0 then
  local ms = math.floor(after / 1000)
  if ms * 1000 < after then ms = ms + 1 end
  local state = compact_state and '%d' or '%d 0'
  redis.call('SET', key, string.format(state, now + after), 'PX', ms + slack_ms)
end
q = math.floor(after / t)
if q * t < after then q = q + 1 end
return { 0, math.min(math.max(capacity - q, 0), capacity), after, 0, 0 }
