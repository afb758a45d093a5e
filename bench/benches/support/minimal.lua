-- The anchor of benches/redis.rs: the least a one-limit token bucket
-- (GCRA, cost 1) can do in Redis: TIME, one GET, one SET, three integers
-- back. KEYS[1]: the state; ARGV: capacity, interval in microseconds.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local capacity, interval = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1])) or now, now)
local after = tat + interval
local span = capacity * interval
if after - now > span then
  return { after - now - span, capacity - math.ceil((tat - now) / interval), tat - now }
end
redis.call('SET', KEYS[1], string.format('%d', after), 'PX', math.ceil((after - now) / 1000))
return { 0, capacity - math.ceil((after - now) / interval), after - now }
