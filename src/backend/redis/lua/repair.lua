-- tower-ratelimit: the keys of one client whose decision failed, each
-- mended only if its own type or contents show why (repair.rs). Nothing
-- is deleted on a guess: a key that holds what the decision scripts
-- write is left as it is.
--
-- KEYS: every key the failed decision read, in its order (each limit's,
-- a sliding log's list and sum, a penalty box's strikes and bans).
-- ARGV[1]: the client's field in the packed format's shared hashes ('' in
-- the compact format). ARGV[2]: each key's kind, a letter a key: 's' a
-- state of its own (a string), 'h' the client's field of a shared hash,
-- 'l' a sliding log's entries (a list of "at cost"), 'n' a sliding log's
-- sum (a whole number).
-- Reply: how many keys were deleted. 0 says the keys explain nothing: the
-- decision's failure was the store's. Any refusal but WRONGTYPE (a
-- missing permission, a full Redis) ends the repair with that error,
-- before anything more is deleted.

local field, kinds = ARGV[1], ARGV[2]
local mended = 0

-- Whether a pcall's reply says the key holds another type.
local function wrong_type(reply)
  if type(reply) ~= 'table' or not reply.err then return false end
  if string.find(reply.err, 'WRONGTYPE', 1, true) then return true end
  return error(reply)
end

-- Whether `text` is a whole number a double holds exactly.
local function whole(text)
  return text ~= nil and #text <= 16 and string.match(text, '^%d+$') ~= nil
    and tonumber(text) < 9007199254740992
end

-- Whether a sliding log's entry is one the scripts can compute with.
local function entry_ok(entry)
  local at, cost = string.match(entry, '^(%d+) (%d+)$')
  return whole(at) and whole(cost)
end

for i, key in ipairs(KEYS) do
  local kind = string.sub(kinds, i, i)
  local bad = false
  if kind == 'h' then
    -- A shared hash that is no hash fails every client of its shard
    -- alike, and holds no state anyone could read: the key is the fault.
    bad = wrong_type(redis.pcall('HGET', key, field))
  elseif kind == 'l' then
    local entries = redis.pcall('LRANGE', key, 0, -1)
    bad = wrong_type(entries)
    if not bad then
      for _, entry in ipairs(entries) do
        if not entry_ok(entry) then
          bad = true
          break
        end
      end
    end
  elseif kind == 'n' then
    local sum = redis.pcall('GET', key)
    bad = wrong_type(sum) or (sum and not whole(sum))
  else
    -- A state of a fixed size: any text reads (what does not parse is no
    -- state), so only another type is a fault.
    bad = wrong_type(redis.pcall('GET', key))
  end
  if bad then
    redis.call('DEL', key)
    mended = mended + 1
  end
end
return mended
