-- The lean script of a check under one GCRA limit (also the token and the
-- leaky bucket), no penalty box, denials not counted: the most common call,
-- written out with no function of its own. Lua makes every function a
-- script defines on every call (about 1,400 instructions each, a quarter of
-- a GET), so this repeats gcra.lua's check and commit inline, and one
-- conformance proptest holds it to algorithm/gcra.rs as the others are.
-- KEYS: the state. ARGV: now (microseconds, or "" for the server's TIME),
-- cost, limit, interval (the lean scripts' arguments: no mode, no penalty
-- box, no algorithm code, and of the window and the interval only the one
-- the script uses; then, under the packed format, the client's field).
-- Reply as check.lua's for one limit,
-- without its two trailing zeros (no ban, no permit), or in a batch its
-- three numbers themselves (`{{reply}}`: batch.lua lays them out flat);
-- every C function it would call (math.floor, math.max) is arithmetic
-- here instead.

local cost, capacity, t = {{number}}(ARGV[2]), {{number}}(ARGV[3]), {{number}}(ARGV[4])
local key = KEYS[{{ko}}1]

local tat = 0
local s
-- In a batch, a new client's state is claimed (SET ... NX GET) where it
-- would be read, as lean_sliding_window.lua's: its TAT after this request
-- is `now + cost * t`, written only if the key has none, in the call that
-- reads it (one call where a GET and a SET were two). `claiming` predicts
-- from the last client whether this one is new. A batch has one time, so
-- every new client of one argument list (ARGV here) claims the same state
-- with the same TTL: their text is made once a list (a number's text
-- costs Lua about a tenth of a new client's decision).
if claiming and cost > 0 and cost <= capacity then
  local after = cost * t
  local state, px = ARGV.claim_state, ARGV.claim_px
  if not state then
    local ms = (after - after % 1000) / 1000
    if ms * 1000 < after then ms = ms + 1 end
    state, px = string.format('%d', now + after), {{px_text}}(ms + slack_ms)
    ARGV.claim_state, ARGV.claim_px = state, px
  end
  s = {{claim}}
  if not s then return {{reply}}0, capacity - cost, after{{reply_end}} end
  claiming = false
else
  s = {{read}}
  if can_claim then claiming = not s end
end
-- A bare number (the compact format) needs no pattern.
if s then tat = tonumber(s) or tonumber(string.match(s, '^(%d+) %d+ ?%d*$')) or 0 end
-- A time that is none (`nan`, `inf`, negative: a key someone wrote) is no state.
if not (tat >= 0 and tat < 9007199254740992) then tat = 0 end
local in_use = tat - now
if in_use < 0 then in_use = 0 end
-- Units free: capacity - ceil(in_use / t), exactly (see common.lua: a
-- floor that rounding took one too far up is still the right ceiling).
-- `x - x % t` is t * floor(x / t) without calling math.floor.
local q = (in_use - in_use % t) / t
if q * t < in_use then q = q + 1 end
local free = capacity - q
if free < 0 then free = 0 end
if cost > capacity then return {{reply}}-1, free, in_use{{reply_end}} end
local after = in_use + cost * t
local span = capacity * t
if after > span then return {{reply}}after - span, free, in_use{{reply_end}} end
if cost > 0 then
  local ms = (after - after % 1000) / 1000
  if ms * 1000 < after then ms = ms + 1 end
  local state = string.format('%d', now + after)
  local was, ends = tat, now + after -- (for packed_write.lua)
  local px = {{px_text}}(ms + slack_ms) -- (for the compact format's SET)
  {{write_lean}}
end
q = (after - after % t) / t
if q * t < after then q = q + 1 end
free = capacity - q
if free < 0 then free = 0 end
return {{reply}}0, free, after{{reply_end}}
