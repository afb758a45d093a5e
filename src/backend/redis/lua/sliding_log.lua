-- Sliding window log: a list of "at cost" entries, oldest first, and their
-- sum in a second key. Mirrors algorithm/sliding_log.rs.

local function log_entry(s)
  local at, cost = string.match(s, '^(%d+) (%d+)$')
  return tonumber(at), tonumber(cost)
end

-- Forget entries outside (now - W, now]; returns the cost still inside.
local function log_forget(list, sum, now, w)
  local used = tonumber(redis.call('GET', sum) or '0') or 0
  if now < w then return used end
  local cutoff = now - w
  while true do
    local head = redis.call('LINDEX', list, 0)
    if not head then break end
    local at, cost = log_entry(head)
    if at > cutoff then break end
    redis.call('LPOP', list)
    used = used - cost
  end
  return used
end

local function log_expires(list, w)
  local last = redis.call('LINDEX', list, -1)
  if not last then return 0 end
  local at = log_entry(last)
  return at + w
end

local function log_save(list, sum, now, w, used)
  local expires = log_expires(list, w)
  if used <= 0 or expires <= now then
    redis.call('DEL', list, sum)
    return
  end
  redis.call('SET', sum, num(used), 'PX', ttl_ms(expires - now))
  redis.call('PEXPIRE', list, ttl_ms(expires - now))
end

local function log_reset(list, now, w)
  return math.max(log_expires(list, w) - now, 0)
end

local function log_check(list, sum, now, cost, limit, w)
  local used = log_forget(list, sum, now, w)
  log_save(list, sum, now, w, used)
  if cost > limit then return never(limit, limit - used, log_reset(list, now, w)) end
  if used + cost <= limit then
    local r
    if cost > 0 then r = w else r = log_reset(list, now, w) end
    return allowed(limit, limit - used - cost, r)
  end
  local to_free = used + cost - limit
  local retry_at = now
  for _, s in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local at, c = log_entry(s)
    retry_at = at + w
    to_free = math.max(to_free - c, 0)
    if to_free == 0 then break end
  end
  return denied(retry_at - now, limit, limit - used, log_reset(list, now, w))
end

local function log_consume(list, sum, now, cost, limit, w)
  local used = log_forget(list, sum, now, w)
  cost = math.min(cost, limit)
  if cost == 0 then return end
  while used + cost > limit do
    local head = redis.call('LINDEX', list, 0)
    if not head then break end
    local at, c = log_entry(head)
    local taken = math.min(used + cost - limit, c)
    c = c - taken
    used = used - taken
    if c == 0 then
      redis.call('LPOP', list)
    else
      redis.call('LSET', list, 0, num(at) .. ' ' .. num(c))
    end
  end
  used = used + cost
  local last = redis.call('LINDEX', list, -1)
  local last_at, last_cost
  if last then last_at, last_cost = log_entry(last) end
  if last_at and last_at >= now then
    redis.call('LSET', list, -1, num(last_at) .. ' ' .. num(last_cost + cost))
  else
    redis.call('RPUSH', list, num(now) .. ' ' .. num(cost))
  end
  log_save(list, sum, now, w, used)
end

-- Give back units: they leave the newest entries.
local function log_refund(list, sum, now, units, w)
  local used = log_forget(list, sum, now, w)
  while units > 0 do
    local last = redis.call('LINDEX', list, -1)
    if not last then break end
    local at, c = log_entry(last)
    local taken = math.min(units, c)
    c = c - taken
    used = used - taken
    units = units - taken
    if c == 0 then
      redis.call('RPOP', list)
    else
      redis.call('LSET', list, -1, num(at) .. ' ' .. num(c))
    end
  end
  log_save(list, sum, now, w, used)
end

-- Take units out of the entry made at `at` (a permit given back): whether
-- it was still there.
local function log_release(list, sum, now, at, units, w)
  local used = log_forget(list, sum, now, w)
  local found = false
  for i, s in ipairs(redis.call('LRANGE', list, 0, -1)) do
    local entry_at, c = log_entry(s)
    if entry_at == at then
      local taken = math.min(units, c)
      used = used - taken
      if c == taken then
        redis.call('LREM', list, 1, s)
      else
        redis.call('LSET', list, i - 1, num(entry_at) .. ' ' .. num(c - taken))
      end
      found = true
      break
    end
  end
  log_save(list, sum, now, w, used)
  return found
end
