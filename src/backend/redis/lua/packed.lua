-- The packed key format's store (script.rs, KeyFormat::Packed): a
-- fixed-size state is the field `field` (the client's hash) of a hash that
-- many clients share, one per shard and limit (the state's key here). A
-- hash must outlive its latest field's state, and must not keep the states
-- of clients gone for good.

-- Write `value`, a state that matters for `ms` milliseconds.
local function packed_write(key, value, ms)
  if redis.call('HSET', key, field, value) == 0 then
    -- Only ever lengthened: other fields' states may matter for longer.
    redis.call('PEXPIRE', key, ms, 'GT')
    return
  end
  -- A new field looks at two others at random and deletes those whose
  -- state no longer matters (every state begins with when it stops
  -- mattering). A hash then holds at most about twice the clients whose
  -- states matter: at that size a new field finds one to delete, on
  -- average, for the one it adds.
  local seen = redis.call('HRANDFIELD', key, 2, 'WITHVALUES')
  if #seen == 2 then
    -- This field alone: the hash was made just now, with no expiry yet
    -- (which GT would take for an endless one).
    redis.call('PEXPIRE', key, ms)
    return
  end
  redis.call('PEXPIRE', key, ms, 'GT')
  for i = 1, #seen, 2 do
    local e = tonumber(string.match(seen[i + 1], '^%d+'))
    if e and e <= now then redis.call('HDEL', key, seen[i]) end
  end
end
