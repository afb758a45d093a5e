-- Decisions of one shape sent together (batch.rs), after `decide`, the
-- one decision's script as a function (of its keys and arguments, or for
-- a lean one of where they begin: shape.rs): each is decided in turn, in
-- the order they arrived, exactly as its own call would decide it.
-- ARGV: the number of decisions n; each one's number of keys and of
-- arguments (not for lean decisions, whose shape fixes them: `counts`);
-- then their arguments one decision after another. KEYS: their keys, one
-- decision after another. Reply: each decision's reply (an array), or for
-- one that failed the error's text in its place (a nested error reply
-- would fail the whole call in clients that read it; the others stand).
-- Lean decisions reply with their three numbers, laid out one decision
-- after another in the one array (`keep`: a table and a nested reply a
-- decision cost Redis a tenth of a decision's work), a failed one with its
-- error's text and two zeros.

local n = tonumber(ARGV[1])
local replies = {}
local k, a = 1, {{first_argument}}
for i = 1, n do
  local keys, args = {{counts}}
  local ok, reply, free, reset = pcall(decide, {{arguments}})
  if not ok then
    reply = type(reply) == 'table' and reply.err or tostring(reply)
  end
  {{keep}}
  k, a = k + keys, a + args
end
return replies
