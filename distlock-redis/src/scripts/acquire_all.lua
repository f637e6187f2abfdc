-- Acquire a set of keys in one step, all or none. For the i-th key of n:
-- KEYS[2i-1] the lock and KEYS[2i] its fence counter; ARGV[3i-2] the owner token
-- (32 hex digits), ARGV[3i-1] the TTL in milliseconds, ARGV[3i] how long the counter
-- lives, in milliseconds; ARGV[3n+1], where given, the holder stored with every
-- grant (as acquire.lua stores it). Each key as acquire.lua takes one: a retry of this very
-- owner is ours already; a fence one above the key's last and never below the
-- server's clock in microseconds.
-- Returns {'1', fence_1, ..., fence_n} when every key is granted, or {'0', i, pttl}
-- when the i-th key is held by another owner: then nothing is changed but that
-- holder's waiter mark (release.lua publishes its release).
local n = #KEYS / 2
for i = 1, n do
  local current = redis.call('GET', KEYS[2 * i - 1])
  if current and string.sub(current, 1, 33) ~= ARGV[3 * i - 2] .. ':' then
    if string.sub(current, -1) ~= '!' then
      redis.call('SET', KEYS[2 * i - 1], current .. '!', 'KEEPTTL')
    end
    return {'0', tostring(i), tostring(redis.call('PTTL', KEYS[2 * i - 1]))}
  end
end
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local answer = {'1'}
local who = ''
if ARGV[3 * n + 1] then
  who = '/' .. string.format('%.0f', math.floor(now_us / 1000)) .. '/' .. ARGV[3 * n + 1] .. '/'
end
for i = 1, n do
  local lock, counter = KEYS[2 * i - 1], KEYS[2 * i]
  local owner, ttl, counter_ttl = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local current = redis.call('GET', lock)
  if current then
    -- A retry of this very request whose reply was lost: the grant is ours already.
    redis.call('PEXPIRE', lock, ttl)
    redis.call('PEXPIRE', counter, counter_ttl)
    answer[i + 1] = string.match(current, '%d+', 34)
  else
    local last = tonumber(redis.call('GET', counter) or '0')
    local fence = string.format('%.0f', math.max(last + 1, now_us))
    redis.call('SET', counter, fence, 'PX', counter_ttl)
    redis.call('SET', lock, owner .. ':' .. fence .. who, 'PX', ttl)
    answer[i + 1] = fence
  end
end
return answer
