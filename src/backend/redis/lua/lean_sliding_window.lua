-- The lean driver of a check under one sliding window counter, no penalty
-- box, denials not counted: sliding_window.lua's functions (its exact
-- arithmetic is too long to repeat inline) without check.lua's tables.
-- KEYS: the state. ARGV: now (or ""), cost, limit, window (the lean
-- scripts' arguments, then under the packed format the client's
-- field). Reply as check.lua's for one limit, without its two trailing
-- zeros (no ban, no permit); in a batch, flat (see lean_gcra.lua).

local cost, limit, w = {{number}}(ARGV[2]), {{number}}(ARGV[3]), {{number}}(ARGV[4])
local key = KEYS[{{ko}}1]

-- A new client (no state) is allowed what fits the limit, and its state
-- becomes this window's count. So in a batch of new clients, each claims
-- that state: it is written only if the key has none, in the one call that
-- reads it (SET ... NX GET: one call where a GET and a SET were two); a
-- client with a state goes on with what that call read. Whether the last
-- client was new predicts the next (`claiming`): a claim costs a known
-- client the state text it made for nothing, and a lone decision has no
-- last client, so it reads first (shape.rs: `can_claim`). A batch's
-- claims of one window and cost share their state's text and a TTL from
-- the first one's time, never short for a later one (`claims`: made once,
-- they take a batch of new clients a sixth fewer instructions).
if claiming and cost > 0 and cost <= limit then
  local e = idiv(now, w) * w + 2 * w
  local of_window = claims[e]
  if not of_window then
    of_window = {}
    claims[e] = of_window
  end
  local made = of_window[cost]
  if not made or made[3] ~= slack_ms or made[4] > now then
    -- (As write_state writes it: one integer where it fits.)
    local state
    if e % 1000 == 0 and e >= 1e15 and cost < 1000 then
      state = string.format('%d000%03d', e / 1000, cost)
    else
      state = string.format('%d 0 %d', e, cost)
    end
    made = { state, num(ceil_div(e - now, 1000) + slack_ms), slack_ms, now }
    of_window[cost] = made
  end
  local state, px = made[1], made[2]
  local s = {{claim}}
  if not s then return {{reply}}0, limit - cost, e - now{{reply_end}} end
  claiming = false
  read_state(key, s)
elseif can_claim then
  claiming = read_state(key) == 0
end
local o = sw_check(key, now, cost, limit, w)
if o[1] == 0 and cost > 0 then sw_consume(key, now, cost, limit, w) end
return {{unpack}}(o)
