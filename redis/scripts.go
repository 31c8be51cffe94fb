package redis

import goredis "github.com/redis/go-redis/v9"

// The lock's keys, all in one hash slot so the scripts also run on Redis
// Cluster (a key without braces hashes over its whole name, and "{K}:q"
// hashes over K):
//
//	K        the lock: a string holding the holder's value, with PX TTL
//	{K}:q    the wait queue: a sorted set of waiters' values, scored by
//	         arrival (server time in microseconds)
//	{K}:w    the waiters' entries: value -> "DEADLINE_MS TTL_MS CHANNEL",
//	         where DEADLINE_MS (server time) ends an entry its waiter
//	         stopped refreshing, TTL_MS is the waiter's lease TTL and
//	         CHANNEL is where it is told that it was handed the lock
//	{K}:o    the holder's changes, for observers: a stream, capped at about
//	         64 entries, with one entry {v: VALUE} each time a script gives
//	         the lock to VALUE or frees it (v empty), written only while
//	         {K}:n exists; an expiry writes nothing, observers notice it by
//	         the key's PTTL
//	{K}:n    present while someone observes the lock: each observer sets
//	         it with a TTL of observerTTL and refreshes it well before, so
//	         a lock nobody observes costs no stream write per change
//
// Every script runs atomically, so no client can act between a check and
// the write that depends on it. go-redis's Script.Run sends EVALSHA and
// falls back to EVAL when the server answers NOSCRIPT (a restarted server,
// SCRIPT FLUSH), which also loads the script for the next call.

// luaHelpers are shared by the scripts that hand the lock on or note its
// holder for observers.
const luaHelpers = `
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- live_head returns the first waiter whose entry has not run out, and its
-- entry, dropping dead ones on the way.
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

-- record appends holder v (empty: free) to the observers' stream o.
local function record(o, v)
  redis.call('xadd', o, 'MAXLEN', '~', '64', '*', 'v', v)
  redis.call('pexpire', o, 86400000)
end

-- note records a change of holder for observers, when there are any.
local function note(o, n, v)
  if redis.call('exists', n) == 1 then record(o, v) end
end

-- handoff gives the lock to the first live waiter, with that waiter's own
-- TTL, overwriting the key whatever it held (nothing, the releasing
-- holder's value, or a newcomer's claim), and tells the waiter on its
-- channel. The caller checked that q exists.
-- It returns the new holder's value, or false when no waiter was live.
local function handoff(k, q, w)
  local now = now_ms()
  local h, e = live_head(q, w, now)
  if not h then return false end
  local _, ttl, ch = string.match(e, '^(%d+) (%d+) (.+)$')
  redis.call('set', k, h, 'px', ttl)
  redis.call('zrem', q, h)
  redis.call('hdel', w, h)
  redis.call('publish', ch, h)
  return h
end
`

// acquireScript takes the lock for ARGV[1] (the acquisition's value) with
// TTL ARGV[2] ms, when it is free and no live waiter was there first.
// ARGV[3] is "1" to join (or stay in) the wait queue when the lock is not
// free, with ARGV[4] as the channel to be told on; "0" for one attempt.
// ARGV[5] is "1" after a claim (see claim) set the key to ARGV[1] but
// found a queue or an observer: the script then hands the lock to the
// first live waiter, who was there first, or else keeps it and notes it.
//
// It returns {1} when held: newly set, or handed to us while we waited
// (then its expiry is reset to our TTL, so the caller's send time bounds
// the server's expiry). Otherwise {0, V, PTTL, HEAD}: V the holder's value
// (or the first waiter's, when the lock is free but reserved for it), PTTL
// the key's remaining TTL in ms (-2 when it is free), HEAD 1 when we are
// first in the queue.
var acquireScript = goredis.NewScript(luaHelpers + `
local k, q, w, o, n = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local v, ttl, wait = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local queued = redis.call('exists', q) == 1
if ARGV[5] == '1' and redis.call('get', k) == v then
  local h = queued and handoff(k, q, w)
  note(o, n, h or v)
  if not h then return {1} end
end
if not queued and redis.call('set', k, v, 'nx', 'px', ARGV[2]) then
  note(o, n, v)
  return {1}
end
local cur = redis.call('get', k)
if cur == v then
  redis.call('pexpire', k, ARGV[2])
  return {1}
end
local head, now, t = false, 0, false
if queued or wait then
  now, t = now_ms()
  head = live_head(q, w, now)
end
if not cur and (not head or head == v) then
  redis.call('set', k, v, 'px', ARGV[2])
  note(o, n, v)
  if head then
    redis.call('zrem', q, v)
    redis.call('hdel', w, v)
  end
  return {1}
end
if wait then
  local added = redis.call('zadd', q, 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), v)
  if added == 1 and not head then head = v end
  redis.call('hset', w, v, (now + ttl) .. ' ' .. ARGV[2] .. ' ' .. ARGV[4])
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

// releaseScript frees the lock if it holds ARGV[1] and hands it to the
// first live waiter, or else takes ARGV[1] out of the wait queue. It
// returns 1 when the lock was ours. Release, a waiter giving up and Close
// all use it. A lock with neither a queue nor an observer is done with
// before the helpers are defined (each definition makes a closure, on
// every run): EXISTS, GET, DEL. A holder is never in the queue (each way
// of taking the lock leaves it), so a holder's release skips the queue's
// ZREM and HDEL, and a handoff overwrites the key instead of deleting it
// first. The count of EXISTS of the queue and the observers' mark, less
// that of the queue alone, says whether anyone observes.
var releaseScript = goredis.NewScript(`
local k, q, w, o, n, v = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]
local marks = redis.call('exists', q, n)
local cur = redis.call('get', k)
if marks == 0 then
  if cur ~= v then return 0 end
  redis.call('del', k)
  return 1
end
` + luaHelpers + `
local queued = redis.call('exists', q)
if cur ~= v then
  if queued == 1 then
    redis.call('zrem', q, v)
    redis.call('hdel', w, v)
  end
  return 0
end
local h = queued == 1 and handoff(k, q, w)
if not h then redis.call('del', k) end
if marks - queued == 1 then record(o, h or '') end -- observed
return 1
`)

// renewScript resets the lock's TTL to ARGV[2] ms if it still holds
// ARGV[1] (compare-and-PEXPIRE). It returns 1 when renewed, 0 when the key
// is gone or holds someone else's value.
var renewScript = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
`)

// forceScript deletes the lock whoever holds it, hands it to the first
// live waiter, and returns the value it held (nil when it was free).
var forceScript = goredis.NewScript(luaHelpers + `
local k, q, w, o, n = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local cur = redis.call('get', k)
if not cur then return false end
local h = redis.call('exists', q) == 1 and handoff(k, q, w)
if not h then redis.call('del', k) end
note(o, n, h or '')
return cur
`)

// stateScript registers an observer of the lock, setting {K}:n (KEYS[3])
// for ARGV[1] ms, and reads the lock's holder value (false when free), its
// PTTL in ms, and the ID of the last entry of its change stream ("0-0" when
// none), at one moment. When {K}:n was missing (nobody observed, or every
// observer's registration lapsed, or the key was lost), changes may have
// gone unwritten: it first appends the holder there is now, so that every
// observer reading the stream from where it was converges on it.
var stateScript = goredis.NewScript(luaHelpers + `
if redis.call('exists', KEYS[3]) == 0 then
  record(KEYS[2], redis.call('get', KEYS[1]) or '')
end
redis.call('set', KEYS[3], '1', 'px', ARGV[1])
local last = redis.call('xrevrange', KEYS[2], '+', '-', 'COUNT', 1)[1]
local id = '0-0'
if last then id = last[1] end
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]), id}
`)
