-- The fair step's first part, run before acquire.lua in one script (contract point
-- 10). KEYS[3]: the key's queue (owner -> order of arrival); KEYS[4]: the waiters'
-- places (owner -> when the place runs out, in ms of the server's clock); KEYS[5]:
-- the TTL each waiter asks for, which a release that hands the lock over grants
-- (handoff.lua), as "<ttl>" or "<ttl>/<holder>" where the step carries a holder
-- (ARGV[6]). ARGV[5]: how long this waiter's place lasts, in milliseconds. Drops
-- the waiters whose place ran out, queues this owner (or renews its place), and
-- returns {0, pttl, latest} unless this owner is at the head and the key is free;
-- then it leaves the queue and acquire.lua grants as a plain acquire does. `latest`
-- is the key's latest fence (the counter), or, where the counter is gone, the clock
-- in microseconds, which no earlier fence reaches: a grant handed over with a higher
-- fence was made after this step. An owner that holds the key already (a retry whose
-- reply was lost, or a grant a release handed it) goes straight to acquire.lua.
local held = redis.call('GET', KEYS[1])
if not (held and string.sub(held, 1, 33) == ARGV[1] .. ':') then
  local clock = redis.call('TIME')
  local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local latest = redis.call('GET', KEYS[2]) or (clock[1] .. string.format('%06d', tonumber(clock[2])))
  local place = tonumber(ARGV[5])
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)) do
    if gone ~= ARGV[1] then
      redis.call('ZREM', KEYS[3], gone)
      redis.call('ZREM', KEYS[4], gone)
      redis.call('HDEL', KEYS[5], gone)
    end
  end
  if not redis.call('ZSCORE', KEYS[3], ARGV[1]) then
    -- Arrival order: one more than the tail's.
    local tail = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
    local order = 1
    if tail[2] then
      order = tonumber(tail[2]) + 1
    end
    redis.call('ZADD', KEYS[3], order, ARGV[1])
  end
  redis.call('ZADD', KEYS[4], now_ms + place, ARGV[1])
  local asked = ARGV[2]
  if ARGV[6] then
    asked = asked .. '/' .. ARGV[6]
  end
  redis.call('HSET', KEYS[5], ARGV[1], asked)
  -- The queue lives as long as its longest place.
  for i = 3, 5 do
    if redis.call('PTTL', KEYS[i]) < place then
      redis.call('PEXPIRE', KEYS[i], place)
    end
  end
  if held then
    -- This waiter waits for the holder: mark the grant as one a fair waiter queued
    -- for ('!!', acquire.lua), so that its release hands the lock over.
    if string.sub(held, -2) ~= '!!' then
      local mark = '!!'
      if string.sub(held, -1) == '!' then
        mark = '!'
      end
      redis.call('SET', KEYS[1], held .. mark, 'KEEPTTL')
    end
    return {0, tostring(redis.call('PTTL', KEYS[1])), latest}
  end
  if redis.call('ZRANGE', KEYS[3], 0, 0)[1] ~= ARGV[1] then
    return {0, '-2', latest}
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
  redis.call('HDEL', KEYS[5], ARGV[1])
end
-- This owner is first and the key is free (or already its own): acquire.lua follows.
