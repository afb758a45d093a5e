-- The packed format's write (script.rs, KeyFormat::Packed), in place of a
-- state's SET: `state` as the field `field` (the client's hash) of the
-- hash `key` that many clients share, one per shard and limit. Every SET
-- of a state has in scope `ends`, when this state stops mattering (every
-- state begins with it), and `was`, when the state it replaces did (0:
-- none). The hash must outlive every field's state, and must not keep the
-- states of clients gone for good.
do
  -- The hash outlives the next whole ten seconds after each of its
  -- fields' ends, so a write needs no PEXPIRE when the state it replaces,
  -- or another field's, ends in the same ten seconds or later: a known
  -- client's write is an HSET alone but about once in ten seconds of its
  -- state's progress (a call costs a tenth of the script).
  local step = 10000000
  local cell = ends - ends % step + step
  -- From now until then; as whole milliseconds (never short) only where
  -- a PEXPIRE may be made: found before the HSET, they cost a write that
  -- makes none about 300 instructions.
  local d = cell - now
  if redis.call('HSET', key, field, state) == 0 then
    if cell > was - was % step + step then
      -- Only ever lengthened: other fields' states may matter for longer.
      redis.call('PEXPIRE', key, (d - d % 1000) / 1000 + 1 + slack_ms, 'GT')
    end
  else
    -- A new field looks at two others at random and deletes those whose
    -- state no longer matters. A hash then holds at most about twice the
    -- clients whose states matter: at that size a new field finds one to
    -- delete, on average, for the one it adds. What the others' ends say
    -- the hash outlives may spare the PEXPIRE.
    local seen = redis.call('HRANDFIELD', key, 2, 'WITHVALUES')
    local outlives = 0
    for i = 1, #seen, 2 do
      local other = tonumber(string.match(seen[i + 1], '^%d+'))
      -- (A state in one integer ends at its first 13 digits' millisecond.)
      if other and other >= 1e18 then other = tonumber(string.sub(seen[i + 1], 1, 13)) * 1000 end
      if other and seen[i] ~= field then
        local reach = other - other % step + step
        if reach > outlives then outlives = reach end
        if other <= now then redis.call('HDEL', key, seen[i]) end
      end
    end
    local ms = (d - d % 1000) / 1000 + 1 + slack_ms
    if #seen == 2 then
      -- This field alone: the hash was made just now, with no expiry yet
      -- (which GT would take for an endless one).
      redis.call('PEXPIRE', key, ms)
    elseif cell > outlives then
      redis.call('PEXPIRE', key, ms, 'GT')
    end
  end
end
