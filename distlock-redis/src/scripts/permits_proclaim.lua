-- A leader's new value (PermitBackend::proclaim). KEYS[1]: the grants; KEYS[2]: the
-- name's hash; KEYS[3]: the terms. ARGV[1]: the owner token; ARGV[2]: the value;
-- ARGV[3]: the name's channel. Only while the owner's grant is live: its record's
-- value, and its term's, become ARGV[2] (the fence, count, holder and grant time
-- stay), and the channel is told. Returns 1 then, 0 when the owner holds nothing
-- unexpired (nothing is changed).
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local until_ms = redis.call('ZSCORE', KEYS[1], ARGV[1])
local grant = redis.call('HGET', KEYS[2], 'g:' .. ARGV[1])
if not until_ms or tonumber(until_ms) <= now_ms or not grant then
  return 0
end
-- A field "<flag>" or "<flag>/<ms>/<length>", then the holder of that length (none
-- without one) in front of the value (permits_acquire.lua).
local function holder_of(tag, rest)
  local length = tonumber(string.match(tag, '/(%d+)$') or '0')
  return string.sub(rest, 1, length)
end
local fence, count, tag, rest = string.match(grant, '^(%d+):(%d+):([^:]*):(.*)$')
local holder = holder_of(tag, rest)
-- The grant now carries a value: its flag is '1'.
tag = '1' .. string.sub(tag, 2)
redis.call('HSET', KEYS[2], 'g:' .. ARGV[1], fence .. ':' .. count .. ':' .. tag .. ':' .. holder .. ARGV[2])
for _, term in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], fence, fence)) do
  local f, previous, after = string.match(term, '^(%d+):([^:]*):(.*)$')
  if f == fence then
    redis.call('ZREM', KEYS[3], term)
    redis.call('ZADD', KEYS[3], fence, f .. ':' .. previous .. ':' .. holder_of(previous, after) .. ARGV[2])
  end
end
redis.call('PUBLISH', ARGV[3], '')
return 1
