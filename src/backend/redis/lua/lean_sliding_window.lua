-- The lean driver of a check under one sliding window counter, no penalty
-- box, denials not counted: sliding_window.lua's functions (its exact
-- arithmetic is too long to repeat inline) without check.lua's tables.
-- KEYS: the state. ARGV: now (or ""), cost, limit, window (the lean
-- scripts' arguments, then under the packed format the client's
-- field). Reply as check.lua's.

local cost, limit, w = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local key = KEYS[1]

local o = sw_check(key, now, cost, limit, w)
if o[1] == 0 and cost > 0 then sw_consume(key, now, cost, limit, w) end
-- No ban, no permit.
return { o[1], o[2], o[3], 0, 0 }
