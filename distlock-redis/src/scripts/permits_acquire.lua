-- The grant step of permits (PermitBackend). KEYS[1]: the grants (owner -> when it
-- runs out, in ms of the server's clock); KEYS[2]: the name's hash: 'limit', the
-- fence counter 'fence', the last term's fence 'term', 'g:<owner>' ->
-- "<fence>:<count>:<0|1>:<value>" per grant and 'p:<owner>' -> count per place;
-- KEYS[3]: the places (owner -> when it runs out); KEYS[4]: the terms (by fence,
-- "<fence>:<previous>:<value>"). Where a holder is given, a grant's "<0|1>" and a
-- term's "<previous>" are followed by "/<ms>/<length>" (the grant's time in ms of the
-- server's clock, and the holder's length in bytes), and its value is preceded by the
-- holder.
-- ARGV: owner, ttl ms, count, limit, place ms (0: none), '1' when a value is given,
-- the value, how long the name's record is kept (ms), how many terms are kept, the
-- name's channel (observers of an election hear of each term on it), and the holder
-- (absent: none is stored).
-- Returns {1, fence} when granted, {0, pttl} when not, {-1, limit} when the name's
-- grants have another limit.
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local count, limit, place = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = math.floor(now_us / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)) do
  redis.call('ZREM', KEYS[1], gone)
  redis.call('HDEL', KEYS[2], 'g:' .. gone)
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)) do
  redis.call('ZREM', KEYS[3], gone)
  redis.call('HDEL', KEYS[2], 'p:' .. gone)
end
-- Every key of the name lives at least `ms` more.
local function keep(ms)
  for i = 1, 4 do
    local left = redis.call('PTTL', KEYS[i])
    if left == -1 or (left >= 0 and left < ms) then
      redis.call('PEXPIRE', KEYS[i], ms)
    end
  end
end
local keep_ms = tonumber(ARGV[8])
local holders = redis.call('ZRANGE', KEYS[1], 0, -1)
if #holders > 0 then
  local held_limit = tonumber(redis.call('HGET', KEYS[2], 'limit'))
  if held_limit ~= limit then
    return {-1, tostring(held_limit)}
  end
end
local mine = redis.call('HGET', KEYS[2], 'g:' .. owner)
if mine then
  -- A retry of this very request whose reply was lost: the grant is ours already.
  redis.call('ZADD', KEYS[1], now_ms + ttl, owner)
  keep(keep_ms)
  return {1, string.match(mine, '^(%d+):')}
end
local used = 0
for _, holder in ipairs(holders) do
  local grant = redis.call('HGET', KEYS[2], 'g:' .. holder)
  used = used + tonumber(string.match(grant, '^%d+:(%d+):'))
end
local held_back = false
for _, waiter in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  if waiter ~= owner and tonumber(redis.call('HGET', KEYS[2], 'p:' .. waiter)) > count then
    held_back = true
    break
  end
end
if used + count > limit or held_back then
  if place > 0 then
    redis.call('ZADD', KEYS[3], now_ms + place, owner)
    redis.call('HSET', KEYS[2], 'p:' .. owner, count)
    keep(place)
  end
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local pttl = -2
  if first[2] then
    pttl = tonumber(first[2]) - now_ms
  end
  return {0, tostring(pttl)}
end
-- One more than the name's last fence, and never below the server's clock in
-- microseconds: after a restart that lost the record, fences still go up.
local last = tonumber(redis.call('HGET', KEYS[2], 'fence') or '0')
local fence = string.format('%.0f', math.max(last + 1, now_us))
local valued = ARGV[6] == '1'
local flag = valued and '1' or '0'
local who, holder = '', ''
if ARGV[11] then
  who = '/' .. tostring(now_ms) .. '/' .. tostring(string.len(ARGV[11]))
  holder = ARGV[11]
end
redis.call('HSET', KEYS[2], 'fence', fence, 'limit', ARGV[4],
  'g:' .. owner, fence .. ':' .. ARGV[3] .. ':' .. flag .. who .. ':' .. holder .. ARGV[7])
redis.call('HDEL', KEYS[2], 'p:' .. owner)
redis.call('ZREM', KEYS[3], owner)
redis.call('ZADD', KEYS[1], now_ms + ttl, owner)
if valued then
  local previous = redis.call('HGET', KEYS[2], 'term') or '0'
  redis.call('ZADD', KEYS[4], fence, fence .. ':' .. previous .. who .. ':' .. holder .. ARGV[7])
  redis.call('HSET', KEYS[2], 'term', fence)
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -(tonumber(ARGV[9]) + 1))
  redis.call('PUBLISH', ARGV[10], '')
end
keep(keep_ms)
return {1, fence}
