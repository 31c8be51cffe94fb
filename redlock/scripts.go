package redlock

import goredis "github.com/redis/go-redis/v9"

// Each node keeps, for lock K, the same three keys as the redis package's
// single-node lock (all in K's Cluster hash slot):
//
//	K        the lock: the holder's value, with PX TTL
//	{K}:q    the wait queue: waiters' values, scored by the waiter's own
//	         start time (microseconds), so that every node orders the same
//	         waiters the same way
//	{K}:w    value -> "DEADLINE_MS CHANNEL": DEADLINE_MS (the node's time)
//	         ends an entry its waiter stopped refreshing
//
// Unlike the single node, a release does not hand the lock over (the next
// holder needs a majority, which no one node can give): it leaves the key
// free but reserved for the first live waiter, whom it tells on its
// channel. That waiter then acquires on every node in parallel, where it
// is first too. Fresh acquisitions do not barge past waiters, and since
// every node orders waiters alike, waiters do not split the vote.

const luaHelpers = `
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function live_head(q, w, now)
  while true do
    local h = redis.call('zrange', q, 0, 0)[1]
    if not h then return false, false end
    local e = redis.call('hget', w, h)
    if e and tonumber(string.match(e, '^(%d+)')) > now then return h, e end
    redis.call('zrem', q, h)
    redis.call('hdel', w, h)
  end
end

local function notify_head(q, w)
  local h, e = live_head(q, w, now_ms())
  if h then redis.call('publish', string.match(e, '^%d+ (.+)$'), h) end
end
`

// acquireScript sets K to ARGV[1] with TTL ARGV[2] ms when it is free and
// no live waiter is before us. With ARGV[3] = "1" it joins (or refreshes
// its place in) the queue with score ARGV[4] and channel ARGV[5] when it
// cannot. ARGV[6] is "1" after a claim (see claim) set K to ARGV[1] but
// found a queue: when a live waiter is first, K was free but reserved for
// it, so the script frees K again and tells that waiter. It returns {1}
// when K holds our value, else {0, V, PTTL, HEAD} as in the redis package.
var acquireScript = goredis.NewScript(luaHelpers + `
local k, q, w = KEYS[1], KEYS[2], KEYS[3]
local v, ttl, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local queued = redis.call('exists', q) == 1
if ARGV[6] == '1' and redis.call('get', k) == v then
  local h, e = false, false
  if queued then h, e = live_head(q, w, now_ms()) end
  if not h then return {1} end
  redis.call('del', k)
  redis.call('publish', string.match(e, '^%d+ (.+)$'), h)
end
if not queued and redis.call('set', k, v, 'nx', 'px', ttl) then
  return {1}
end
local cur = redis.call('get', k)
if cur == v then
  redis.call('pexpire', k, ttl)
  return {1}
end
local head, now = false, 0
if queued or wait then
  now = now_ms()
  head = live_head(q, w, now)
end
if not cur and (not head or head == v) then
  redis.call('set', k, v, 'px', ttl)
  if head then
    redis.call('zrem', q, v)
    redis.call('hdel', w, v)
  end
  return {1}
end
if wait then
  redis.call('hset', w, v, (now + ttl) .. ' ' .. ARGV[5])
  if not redis.call('zscore', q, v) then
    redis.call('zadd', q, ARGV[4], v)
    head = live_head(q, w, now)
  end
  -- The queue's keys outlive every live entry (each one ends within ttl)
  -- by at most 2 * ttl; refreshed once per ttl, not on every attempt.
  for _, key in ipairs({q, w}) do
    if redis.call('pttl', key) < ttl then redis.call('pexpire', key, 2 * ttl) end
  end
end
local first = 0
if head == v then first = 1 end
return {0, cur or head or '', redis.call('pttl', k), first}
`)

// unlockScript deletes K if it holds ARGV[1]. With ARGV[2] = "1" it also
// leaves the queue; with ARGV[3] = "1" it tells the first live waiter that
// K is free. It returns 1 when K was ours. A lock with no queue is done
// with before the helpers are defined (each definition makes a closure,
// on every run).
var unlockScript = goredis.NewScript(`
local k, q, w, v = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local queued = redis.call('exists', q) == 1
if not queued then
  if redis.call('get', k) ~= v then return 0 end
  redis.call('del', k)
  return 1
end
` + luaHelpers + `
if ARGV[2] == '1' then
  redis.call('zrem', q, v)
  redis.call('hdel', w, v)
end
if redis.call('get', k) ~= v then return 0 end
redis.call('del', k)
if ARGV[3] == '1' then notify_head(q, w) end
return 1
`)

// renewScript is compare-and-PEXPIRE: 1 when renewed, 0 when K is gone or
// holds another value.
var renewScript = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
`)

// forceScript deletes K whoever holds it, tells the first waiter, and
// returns the value it held (nil when free).
var forceScript = goredis.NewScript(luaHelpers + `
local k, q, w = KEYS[1], KEYS[2], KEYS[3]
local cur = redis.call('get', k)
if not cur then return false end
redis.call('del', k)
if redis.call('exists', q) == 1 then notify_head(q, w) end
return cur
`)
