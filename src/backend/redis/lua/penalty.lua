-- The penalty box: strikes "window_end count", bans "forget_at level", each
-- a fixed-size state. Mirrors penalty.rs: PenaltyState.

-- When the ban in force ends, or nil.
local function banned_until(bans_key, now, max_ban)
  local forget_at = read_state(bans_key)
  local until_ = forget_at - max_ban
  if forget_at > now and until_ > now then return until_ end
  return nil
end

-- Count a strike; the length of the ban it starts, or 0.
local function strike(strikes_key, bans_key, now, p)
  local window_end, count = read_state(strikes_key)
  if window_end <= now then
    window_end = now + p.within
    count = 0
  end
  count = count + 1
  if count < p.strikes then
    write_state(strikes_key, now, window_end, count)
    return 0
  end
  redis.call('DEL', strikes_key)
  local forget_at, level = read_state(bans_key)
  if forget_at <= now then level = 1 else level = level + 1 end
  local ban = p.ban
  for _ = 2, math.min(level, 64) do
    if ban >= p.max_ban then break end
    ban = ban * 2
  end
  ban = math.min(ban, p.max_ban)
  write_state(bans_key, now, now + ban + p.max_ban, level)
  return ban
end
