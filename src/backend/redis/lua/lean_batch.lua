-- Lean decisions of one shape sent together (batch.rs), after `decide`,
-- the lean script as a function of where its key is, its arguments and
-- (under the packed format) the client's field: each is decided in turn,
-- in the order they arrived, exactly as its own call would decide it.
-- Decisions of one policy share their arguments (the time, the cost, the
-- limit, the span), so each distinct list is sent once and parsed once a
-- batch; a batch of one list (most are) sends nothing more, others one
-- word naming each decision's list in a byte (a word costs Redis about
-- 800 instructions to read and hand to Lua). ARGV: the number of
-- decisions n, the number of distinct lists m, the lists one after
-- another ({{shared}} words each), then when m > 1 the word whose i-th
-- byte is decision i's list less one, then each decision's own words
-- ({{own}} each: the client's field, or none). KEYS: one a decision.
-- Reply: each decision's three numbers, laid out one decision after
-- another, or for one that failed the error's text and two zeros (a
-- nested error reply would fail the whole call in clients that read it;
-- the others stand).

local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local lists = {}
for j = 1, m do
  local at = 2 + (j - 1) * {{shared}}
  -- Made at its size (`false` for a text that is no number: `now` given
  -- as ""); each text parsed here once.
  lists[j] = { {{list}} }
end
local at = 2 + m * {{shared}}
local which, byte = m > 1 and ARGV[at + 1], string.byte
if which then at = at + 1 end
local list = lists[1]
-- Made at its size, 3n entries: grown one by one, Lua would move them
-- all again at every power of two.
local replies = { byte(string.rep('\0', 3 * n), 1, 3 * n) }
for i = 1, n do
  if which then list = lists[byte(which, i) + 1] end
  local ok, reply, free, reset = pcall(decide, i - 1, list{{field}})
  if not ok then
    reply = type(reply) == 'table' and reply.err or tostring(reply)
  end
  replies[3 * i - 2], replies[3 * i - 1], replies[3 * i] = reply, free or 0, reset or 0
  at = at + {{own}}
end
return replies
