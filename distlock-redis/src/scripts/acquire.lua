-- Acquire in one step. KEYS[1]: the lock; KEYS[2]: the key's fence counter.
-- ARGV[1]: the owner token (32 hex digits); ARGV[2]: the TTL in milliseconds;
-- ARGV[3]: how long the counter lives, in milliseconds (the TTL plus the grace);
-- ARGV[4]: '1' on a Redlock master, where the counter alone mints while it exists
-- ('0' on one server); ARGV[5]: the fair step's place (queue.lua; unused otherwise);
-- ARGV[6]: the holder, stored with the grant (absent: none is stored); ARGV[7], on a
-- Redlock master: the grant's time in ms by the client's clock, the same on every
-- master (absent: the server's clock).
-- KEYS[3], in the fair step only: the key's queue of waiters.
-- The lock's value is "<owner>:<fence>", then, where a holder is stored,
-- "/<ms>/<holder>/" (the grant's time in ms of the server's clock, and the holder
-- as the client encoded it), with a '!' after it once someone has waited
-- for this grant: release.lua publishes the release only then; and '!!' once a fair
-- waiter has queued for it (queue.lua): release_plain.lua leaves such a grant to
-- release.lua, which hands the lock over.
-- Returns {1, fence} when granted, {0, pttl} when another owner holds the key.
-- Each call into the server costs it 1 to 5 microseconds (docs/benchmarks.md), so the
-- free key's path makes as few as it can: one read of both keys, the clock only where
-- the fence needs it, and the two writes.
local read = redis.call('MGET', KEYS[1], KEYS[2])
local current = read[1]
if current then
  if string.sub(current, 1, 33) == ARGV[1] .. ':' then
    -- A retry of this very request whose reply was lost: the grant is ours already.
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
    return {1, string.match(current, '%d+', 34)}
  end
  -- Someone waits for this holder (a waiter subscribes before it asks): mark the
  -- grant, so that its release is published.
  if string.sub(current, -1) ~= '!' then
    redis.call('SET', KEYS[1], current .. '!', 'KEEPTTL')
  end
  return {0, tostring(redis.call('PTTL', KEYS[1]))}
end
-- One more than the last fence of this key, and never below the server's clock in
-- microseconds: after a restart that lost the counter, or once an idle key's counter
-- has expired, fences still go up. A Redlock master takes the clock only when the
-- counter is gone, rounded down to 10 ms, so that masters whose counters agree, or
-- that start a counter within the same 10 ms, propose the same fence.
local last = tonumber(read[2] or '0')
local next_fence = last + 1
local granted_ms = ARGV[7]
if ARGV[4] ~= '1' or last == 0 or (ARGV[6] and not granted_ms) then
  local time = redis.call('TIME')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  if ARGV[4] ~= '1' then
    next_fence = math.max(last + 1, now_us)
  elseif last == 0 then
    next_fence = math.floor(now_us / 10000) * 10000
  end
  granted_ms = granted_ms or string.format('%.0f', math.floor(now_us / 1000))
end
local who = ''
if ARGV[6] then
  who = '/' .. granted_ms .. '/' .. ARGV[6] .. '/'
end
local fence = string.format('%.0f', next_fence)
redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
-- In the fair step, the waiters still queued wait for this grant's release.
local mark = ''
if KEYS[3] and redis.call('ZCARD', KEYS[3]) > 0 then
  mark = '!!'
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence .. who .. mark, 'NX', 'PX', ARGV[2])
return {1, fence}
