-- Shared by release.lua and leave.lua (contract point 10): frees a lock and, where
-- someone waited for it, tells the waiters; in fair mode it hands the lock over.
-- lock, queue, places, ttls, counter: the key names of the lock, its queue of fair
-- waiters (owner -> order of arrival), their places (owner -> when each runs out, in
-- ms of the server's clock), the TTL each waiter asked for in its last fair step, and
-- the fence counter. current: the lock's value. channel: the release channel, or ''
-- to tell no one and hand nothing over. handoff: '1' when a release hands the lock to
-- the first waiter whose place is live: granted in this step as acquire.lua grants,
-- with the next fence, for that waiter's TTL or until its place runs out if that is
-- sooner, out of the queue, and told "<owner>:<fence>" on the channel. Otherwise the message names that waiter (only it
-- is woken), or is empty when no fair waiter is queued (every waiter is woken).
-- grace: how long a counter outlives its lease, in ms.
local function free_and_hand_over(lock, queue, places, ttls, counter, current, channel, handoff, grace)
  redis.call('DEL', lock)
  -- Only a grant someone waited for is marked (acquire.lua, queue.lua): a release
  -- nobody waits for costs no PUBLISH.
  if channel == '' or string.sub(current, -1) ~= '!' then
    return
  end
  local clock = redis.call('TIME')
  local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', places, '-inf', math.floor(now_us / 1000))) do
    redis.call('ZREM', queue, gone)
    redis.call('ZREM', places, gone)
    redis.call('HDEL', ttls, gone)
  end
  local head = redis.call('ZRANGE', queue, 0, 0)[1]
  if not head then
    redis.call('PUBLISH', channel, '')
    return
  end
  -- "<ttl>", or "<ttl>/<holder>" (queue.lua).
  local asked = redis.call('HGET', ttls, head)
  local ttl, holder = nil, ''
  if asked then
    ttl, holder = string.match(asked, '^(%d+)/?(.*)$')
  end
  -- A waiter queued by an earlier version has no TTL here, and one whose place a
  -- server evicting keys lost has no place: the head is woken, and asks.
  local place = redis.call('ZSCORE', places, head)
  if handoff ~= '1' or not ttl or not place then
    redis.call('PUBLISH', channel, head)
    return
  end
  -- The lease lasts the waiter's TTL, or until its place runs out if that is sooner:
  -- a waiter that vanished holds the lock no longer than it would have held the queue.
  local place_left = tonumber(place) - math.floor(now_us / 1000)
  local lease = math.min(tonumber(ttl), place_left)
  -- The next fence, as acquire.lua mints it on one server.
  local last = tonumber(redis.call('GET', counter) or '0')
  local fence = string.format('%.0f', math.max(last + 1, now_us))
  redis.call('SET', counter, fence, 'PX', lease + tonumber(grace))
  redis.call('ZREM', queue, head)
  redis.call('ZREM', places, head)
  redis.call('HDEL', ttls, head)
  -- The waiters still queued wait for this grant's release (a fair waiter's mark,
  -- acquire.lua).
  local mark = ''
  if redis.call('ZCARD', queue) > 0 then
    mark = '!!'
  end
  local who = '/' .. string.format('%.0f', math.floor(now_us / 1000)) .. '/' .. holder .. '/'
  redis.call('SET', lock, head .. ':' .. fence .. who .. mark, 'PX', lease)
  redis.call('PUBLISH', channel, head .. ':' .. fence)
end
