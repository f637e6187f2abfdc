-- Redlock's second step, on one master: the grant's fence, agreed from a majority's
-- proposals, replaces this master's proposal. KEYS[1]: the lock; KEYS[2]: its fence
-- counter. ARGV[1]: the owner token; ARGV[2]: the fence; ARGV[3]: the counter's
-- lifetime in milliseconds. Returns 1 when the owner still holds the key (the counter
-- is then at least the fence), 0 when it does not (nothing is written).
local current = redis.call('GET', KEYS[1])
if not current or string.sub(current, 1, 33) ~= ARGV[1] .. ':' then
  return 0
end
-- Keep what follows the fence: the holder, and the mark of a grant someone waits
-- for (acquire.lua).
local rest = string.match(current, '^%d*(.*)$', 34)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2] .. rest, 'KEEPTTL')
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > last then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
