-- Lean decisions of one shape sent together (batch.rs), after `decide`,
-- the lean script as a function of where its key is, its arguments and
-- (under the packed format) the client's field: each is decided in turn,
-- in the order they arrived, exactly as its own call would decide it.
-- Decisions of one policy share their arguments (the time, the cost, the
-- limit, the span), so each distinct list is sent once and parsed once a
-- batch: a word less to read, store and parse costs Redis about 700
-- instructions. ARGV: the number of decisions n, the number of distinct
-- lists m, the lists one after another ({{shared}} words each), then
-- each decision's list (its number, 1 to m) and its own words ({{own}}
-- in all). KEYS: one a decision. Reply: each decision's three numbers,
-- laid out one decision after another, or for one that failed the error's
-- text and two zeros (a nested error reply would fail the whole call in
-- clients that read it; the others stand).

local n, m = tonumber(ARGV[1]), tonumber(ARGV[2])
local lists = {}
for j = 1, m do
  local list, at = {}, 2 + (j - 1) * {{shared}}
  -- `false` for a text that is no number (`now` given as "").
  for x = 1, {{shared}} do list[x] = number(ARGV[at + x]) or false end
  lists[tostring(j)] = list
end
local replies = {}
local at = 2 + m * {{shared}}
for i = 1, n do
  local ok, reply, free, reset = pcall(decide, i - 1, lists[ARGV[at + 1]]{{field}})
  if not ok then
    reply = type(reply) == 'table' and reply.err or tostring(reply)
  end
  replies[3 * i - 2], replies[3 * i - 1], replies[3 * i] = reply, free or 0, reset or 0
  at = at + {{own}}
end
return replies
