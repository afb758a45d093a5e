-- Decisions of one shape sent together (batch.rs), after `decide`, the
-- one decision's script as a function of its keys and arguments: each is
-- decided in turn, in the order they arrived, exactly as its own call
-- would decide it (lean decisions have lean_batch.lua). ARGV: the number
-- of decisions n; each one's number of keys and of arguments; then their
-- arguments one decision after another. KEYS: their keys, one decision
-- after another. Reply: each decision's reply (an array), or for one that
-- failed the error's text in its place (a nested error reply would fail
-- the whole call in clients that read it; the others stand).

local n = tonumber(ARGV[1])
local replies = {}
local k, a = 1, 2 * n + 2
for i = 1, n do
  local keys, args = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  local ok, reply = pcall(decide, { unpack(KEYS, k, k + keys - 1) },
    { unpack(ARGV, a, a + args - 1) })
  if not ok then
    reply = type(reply) == 'table' and reply.err or tostring(reply)
  end
  replies[i] = reply
  k, a = k + keys, a + args
end
return replies
