-- tower-ratelimit: shared helpers of the decision scripts (after
-- integers.lua).

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
-- rounded up, so a key never vanishes before its state stops mattering
-- (plus `slack_ms`, see now.lua).
local function ttl_ms(us)
  -- A number, not a string: below 10^14 Redis writes it out exactly.
  return ceil_div(us, 1000) + slack_ms
end

-- Fixed-size state: "expires_at v1 [v2]" in one string key, gone when expired;
-- a state whose one value is 0 is the bare number "expires_at", which
-- Redis keeps as an integer (no string of its own: 32 bytes less a key).
-- So is a window's state (`one_integer`: keys of their own version,
-- script.rs, as servers before it would read it as none) whose end is a
-- whole millisecond since 2001 and whose counts are below 1,000: 19
-- digits, the end's 13 in milliseconds then each count's 3, below 2^63
-- (32 bytes less a key than its text; no bare end has 19 digits before
-- the year 33,000).
-- Under the packed format these GET, SET and DEL calls become the same on
-- the client's field of a shared hash (script.rs, packed_write.lua).
-- Each key is read from Redis once per call: what is read or written is
-- kept here, so deciding and then committing costs one GET and one SET.
-- `known`: the key's value as a claim already read it (see
-- lean_sliding_window.lua).
local states = {}

local function read_state(key, known)
  local st = states[key]
  if st then return st[1], st[2], st[3] end
  local e, a, b = 0, 0, 0
  local s = known or {{read}}
  if s then
    -- A bare number (the compact format) needs no pattern.
    local bare = tonumber(s)
    if not bare then
      local se, sa, sb = string.match(s, '^(%d+) (%d+) ?(%d*)$')
      e, a, b = tonumber(se) or 0, tonumber(sa) or 0, tonumber(sb) or 0
    elseif bare >= 1e18 and #s == 19 then
      local counts = tonumber(string.sub(s, 14)) or 0
      e, b = (tonumber(string.sub(s, 1, 13)) or 0) * 1000, counts % 1000
      a = (counts - b) / 1000
    else
      e = bare
    end
    -- What is no time or no count (`nan`, `inf`, negative, past 2^53,
    -- where exact.lua's arithmetic would never end: a key someone wrote)
    -- is no state.
    local top = 9007199254740992
    if not (e >= 0 and e < top and a >= 0 and a < top and b >= 0 and b < top) then
      e, a, b = 0, 0, 0
    end
  end
  states[key] = { e, a, b }
  return e, a, b
end

local function write_state(key, now, e, a, b, one_integer)
  if e <= now then
    states[key] = { 0, 0, 0 }
    {{delete}}
    return
  end
  -- (One format call for the whole text: a call costs Lua far more than
  -- the digits it writes.)
  local state
  if a == 0 and not b then
    state = num(e)
  elseif one_integer and e % 1000 == 0 and e >= 1e15 and a >= 0 and a < 1000 and (b or 0) >= 0 and (b or 0) < 1000 then
    state = string.format('%d%03d%03d', e / 1000, a, b or 0)
  elseif b then
    state = string.format('%d %d %d', e, a, b)
  else
    state = string.format('%d %d', e, a)
  end
  -- (Before `states` is updated: the packed format's write reads the end
  -- of the state this one replaces there, script.rs.)
  {{write}}
  states[key] = { e, a, b or 0 }
end
