-- The packed format's write (script.rs, KeyFormat::Packed), in place of a
-- state's SET: `state` as the field `field` (the client's hash) of the
-- hash `key` that many clients share, one per shard and limit. Every SET
-- of a state has in scope `ends`, when this state stops mattering (every
-- state begins with it), and `was`, when the state it replaces did (0:
-- none). The hash must outlive every field's state, and must not keep the
-- states of clients gone for good.
do
  -- The hash outlives the next whole ten seconds after each of its
  -- states' ends. A state that ends within the same ten seconds as the
  -- state it replaces needs no PEXPIRE, so a known client's write is an
  -- HSET alone but about once in ten seconds of its state's progress (a
  -- call costs a tenth of the script).
  local step = 10000000
  local cell = ends - ends % step + step
  local fresh = redis.call('HSET', key, field, state) == 1
  if fresh or cell > was - was % step + step then
    local d = cell - now
    local ms = (d - d % 1000) / 1000 + 1 + slack_ms
    local alone = false
    if fresh then
      -- A new field looks at two others at random and deletes those whose
      -- state no longer matters. A hash then holds at most about twice
      -- the clients whose states matter: at that size a new field finds
      -- one to delete, on average, for the one it adds.
      local seen = redis.call('HRANDFIELD', key, 2, 'WITHVALUES')
      alone = #seen == 2
      for i = 1, #seen, 2 do
        local stale = tonumber(string.match(seen[i + 1], '^%d+'))
        if stale and stale <= now then redis.call('HDEL', key, seen[i]) end
      end
    end
    if alone then
      -- Made just now, with no expiry yet (which GT takes for endless).
      redis.call('PEXPIRE', key, ms)
    else
      -- Only ever lengthened: other fields' states may matter for longer.
      redis.call('PEXPIRE', key, ms, 'GT')
    end
  end
end
