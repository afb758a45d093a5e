-- The lean script of a check under one fixed window, no penalty box,
-- denials not counted, written out with no function of its own (see
-- lean_gcra.lua for why): fixed_window.lua's check and commit, inline, held
-- to algorithm/fixed_window.rs by the conformance proptest. KEYS, ARGV (see
-- lean_gcra.lua) and reply (without the trailing zeros; in a batch, flat)
-- as check.lua's.

local cost, limit, w = {{number}}(ARGV[2]), {{number}}(ARGV[3]), {{number}}(ARGV[4])
local key = KEYS[{{ko}}1]

-- The current window's end and count.
local e, used = 0, 0
local s = {{read}}
if s then
  -- Text, a bare end, or one integer of 19 digits (common.lua).
  e = tonumber(s)
  if not e then
    local se, su = string.match(s, '^(%d+) (%d+) ?%d*$')
    e, used = tonumber(se) or 0, tonumber(su) or 0
  elseif e >= 1e18 and #s == 19 then
    e, used = (tonumber(string.sub(s, 1, 13)) or 0) * 1000, tonumber(string.sub(s, 14, 16)) or 0
  end
  -- What is no time or no count (`nan`, `inf`, negative, past 2^53: a key
  -- someone wrote) is no state, as in common.lua.
  if not (e >= 0 and e < 9007199254740992 and used >= 0 and used < 9007199254740992) then
    e, used = 0, 0
  end
end
local was = e -- (for packed_write.lua)
if e <= now then
  -- A new window: floor(now / w), exactly (a floor rounding took one too
  -- far up is brought back).
  local q = math.floor(now / w)
  if q * w > now then q = q - 1 end
  e, used = (q + 1) * w, 0
end
local reset = 0
if used > 0 then reset = e - now end
local free = math.min(math.max(limit - used, 0), limit)
if cost > limit then return {{reply}}-1, free, reset{{reply_end}} end
if used + cost > limit then return {{reply}}math.max(e - now, 1), free, reset{{reply_end}} end
if cost > 0 then
  local ms = math.floor((e - now) / 1000)
  if ms * 1000 < e - now then ms = ms + 1 end
  local count, state = math.min(used + cost, limit)
  if count < 1000 and e % 1000 == 0 and e >= 1e15 then
    state = string.format('%d%03d000', e / 1000, count)
  else
    state = string.format('%d %d', e, count)
  end
  local ends = e -- (for packed_write.lua)
  local px = {{px_text}}(ms + slack_ms) -- (for the compact format's SET)
  {{write_lean}}
end
if used + cost > 0 then reset = e - now end
return {{reply}}0, math.min(math.max(limit - used - cost, 0), limit), reset{{reply_end}}
