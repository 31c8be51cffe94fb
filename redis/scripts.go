package redis

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
)

// The lock's keys, all in one hash slot so the scripts also run on Redis
// Cluster (a key without braces hashes over its whole name, and "{K}:q"
// hashes over K):
//
//	K        the lock: a string holding the holder's value, with PX TTL
//	{K}:q    the wait queue, scored by arrival (see rediskit.LuaQueue)
//	{K}:w    the waiters' entries, whose CHANNEL is where a waiter is told
//	         that it was handed the lock (see rediskit.LuaQueue)
//	{K}:o    the holder's changes, for observers: a stream, capped at about
//	         64 entries, with one entry {v: VALUE} each time a script gives
//	         the lock to VALUE or frees it (v empty), written only while
//	         {K}:n exists; an expiry writes nothing, observers notice it by
//	         the key's PTTL
//	{K}:n    present while someone observes the lock: each observer sets
//	         it with a TTL of observerTTL and refreshes it well before, so
//	         a lock nobody observes costs no stream write per change
//	{K}:x:ID one per observer, written only when its observation ends: an
//	         entry there ends the observer's blocked XREAD (see observe)
//
// Every script runs atomically, so no client can act between a check and
// the write that depends on it. go-redis's Script.Run sends EVALSHA and
// falls back to EVAL when the server answers NOSCRIPT (a restarted server,
// SCRIPT FLUSH), which also loads the script for the next call. The paths
// a contended lock takes on every hold come first, with few calls.

// luaNote and rediskit.LuaHandoff are shared by the scripts that note the
// lock's holder for observers or hand the lock on (after
// rediskit.LuaQueue); luaHelpers is both. A script defines only what it uses: each definition
// makes a closure, on every run.
const luaHelpers = luaNote + rediskit.LuaHandoff

const luaNote = `
-- record appends holder v (empty: free) to the observers' stream o.
local function record(o, v)
  redis.call('xadd', o, 'MAXLEN', '~', '64', '*', 'v', v)
  redis.call('pexpire', o, '86400000')
end

-- note records a change of holder for observers, when there are any.
local function note(o, n, v)
  if redis.call('exists', n) == 1 then record(o, v) end
end
`

// acquireScript takes the lock for ARGV[1] (the acquisition's value) with
// TTL ARGV[2] ms, when it is free and no live waiter was there first.
// ARGV[3] is "1" to join (or stay in) the wait queue when the lock is not
// free, with ARGV[4] the attempt's number and the channel to be told on
// (rediskit.Tell); "0" for one attempt.
// ARGV[5] is "1" after a claim (see claim) set the key to ARGV[1] but
// found a queue or an observer: when a live waiter is first, who was there
// before us, the script answers {0, WAITER, -2, 0, 1} and leaves the key
// for the caller to hand over (see claim); else it keeps the key and notes
// it. When the key no longer holds ARGV[1] (a copy that arrived late) it
// only answers. So a late copy changes nothing but an observer's note
// that is true.
//
// It returns {1} when held: newly set, or handed to us while we waited
// (then its expiry is reset to our TTL, so the caller's send time bounds
// the server's expiry). Otherwise {0, V, PTTL, HEAD}: V the holder's value
// (or the first waiter's, when the lock is free but reserved for it), PTTL
// the key's remaining TTL in ms (-2 when it is free), HEAD 1 when we are
// first in the queue.
//
// The two cases a contended lock meets on almost every attempt come first,
// after rediskit.LuaQueue and before luaHelpers is defined (each function
// definition makes a closure, on every run): the key already ours (handed
// to us), and the key held by another, where a waiter joins or stays in
// the queue. A waiter that joins learns whether it is first by its rank,
// so one that joins behind an entry that ran out (a waiter that crashed or
// was cut off) is told it is not first; at its next refresh, which drops
// such entries, it learns that it is, and from then on looks again at the
// key's expiry. PTTL, which only the first waiter uses, is 0 for the
// others.
var acquireScript = goredis.NewScript(rediskit.LuaQueue + `
local k, q, w, o, n = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local v, wait = ARGV[1], ARGV[3] == '1'
if ARGV[5] ~= '1' then
  local cur = redis.call('get', k)
  if cur == v then
    redis.call('pexpire', k, ARGV[2])
    return {1}
  end
  if cur and wait then
    local now, score = clock()
    if join_first(q, w, v, now, score, ARGV[2], ARGV[4]) then
      return {0, cur, redis.call('pttl', k), 1}
    end
    return {0, cur, 0, 0}
  end
end
` + luaNote + `
local queued = redis.call('exists', q) == 1
if ARGV[5] == '1' then
  local cur = redis.call('get', k)
  if cur ~= v then
    return {0, cur or '', redis.call('pttl', k), 0}
  end
  local h = queued and live_head(q, w, (clock()))
  if h then return {0, h, -2, 0, 1} end
  note(o, n, v)
  return {1}
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
local head, now, score = false, false, false
if queued or wait then
  now, score = clock()
  head = live_head(q, w, now)
end
if not cur and (not head or head == v) then
  take(k, q, w, v, ARGV[2], head)
  note(o, n, v)
  return {1}
end
local first = 0
if wait then
  join(q, w, v, now, score, ARGV[2], ARGV[4])
  if not head or head == v then first = 1 end
  return {0, cur or head or v, redis.call('pttl', k), first}
end
if head == v then first = 1 end
return {0, cur or head or '', redis.call('pttl', k), first}
`)

// releaseScript frees the lock if it holds ARGV[1] and hands it to the
// first live waiter, or else takes ARGV[1] out of the wait queue, and when
// it was the first live waiter there (first in line, or behind entries
// that all ran out) tells the live waiter now first (an untagged
// message, which the waiter checks with an attempt: it then looks again
// at the key's expiry, or takes the lock, free and reserved for the one
// that left). It returns 1 when the lock was ours. Release, a waiter giving up and Close
// all use it. A lock with neither a queue nor an observer, and a value
// not in the queue, are done with before the helpers are defined (each
// definition makes a closure, on every run). A holder is in the queue only
// when a copy of its claim took the lock late, while it waited (each way
// of taking the lock leaves the queue, but that copy, the acquisition's
// first attempt, knows no queue): its release skips the queue's ZREM and
// HDEL, the handoff taking its entry out if it meets it, and overwrites
// the key instead of deleting it first. EXISTS of the queue and the observers' mark counts
// both: 2 says someone observes, and 1 does unless the handoff found the
// queue (when it finds none, one more EXISTS tells).
var releaseScript = goredis.NewScript(`
local k, q, w, o, n, v = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]
local marks = redis.call('exists', q, n)
local cur = redis.call('get', k)
if marks == 0 then
  if cur ~= v then return 0 end
  redis.call('del', k)
  return 1
end
local behind = false
if cur ~= v then
  local r = redis.call('zrank', q, v)
  if r and r > 0 then
    behind = true
  else
    redis.call('zrem', q, v)
    redis.call('hdel', w, v)
    if not r then return 0 end
  end
end
` + rediskit.LuaQueue + luaHelpers + `
if cur ~= v then
  local now = (clock())
  local h, e = live_head(q, w, now)
  if behind then
    leave(q, w, v)
    if h ~= v then return 0 end
    h, e = live_head(q, w, now)
  end
  if h then redis.call('publish', select(4, entry(e)), h) end
  return 0
end
local h = handoff(k, q, w, v)
if not h then redis.call('del', k) end
if marks == 2 or (marks == 1 and not h and redis.call('exists', n) == 1) then
  record(o, h or '')
end
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

// forceScript deletes the lock if it still holds ARGV[1], the value the
// caller read, whoever that is, hands it to the first live waiter, and
// returns 1; else it returns 0 and changes nothing. Comparing with the
// value read, not deleting whatever is there, keeps a copy of the request
// that arrives late (see claim) from ending a later holder's lease.
var forceScript = goredis.NewScript(rediskit.LuaQueue + luaHelpers + `
local k, q, w, o, n = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('get', k) ~= ARGV[1] then return 0 end
local h = redis.call('exists', q) == 1 and handoff(k, q, w, ARGV[1])
if not h then redis.call('del', k) end
note(o, n, h or '')
return 1
`)

// stateScript registers an observer of the lock, setting {K}:n (KEYS[3])
// for ARGV[1] ms, and, unless ARGV[2] is "1" (a registration alone),
// reads, at one moment, the lock's holder value (false
// when free), its PTTL in ms, the ID of the last entry of its change
// stream ("0-0" when none), and from XINFO STREAM how many entries were
// ever added to the stream (entries-added, from Redis 7; -1 before, or
// when XINFO is refused), how many it holds, and the ID of its first. When
// {K}:n was missing (nobody observed, or every observer's registration
// lapsed, or the key was lost), changes may have gone unwritten: it first
// appends the holder there is now, so that every observer reading the
// stream from where it was converges on it; so it does when the stream
// itself is gone (evicted, or expired: a holder that keeps the lock for
// days writes no change). Else it renews the stream's expiry, which while
// someone observes never comes.
var stateScript = goredis.NewScript(rediskit.LuaQueue + luaHelpers + `
if redis.call('exists', KEYS[3]) == 0 or redis.call('exists', KEYS[2]) == 0 then
  record(KEYS[2], redis.call('get', KEYS[1]) or '')
else
  redis.call('pexpire', KEYS[2], '86400000')
end
redis.call('set', KEYS[3], '1', 'px', ARGV[1])
if ARGV[2] == '1' then return 0 end
local id, added, length, first = false, -1, 0, '0-0'
local info = redis.pcall('xinfo', 'stream', KEYS[2])
if type(info) == 'table' and not info.err then
  for i = 1, #info, 2 do
    local f, v = info[i], info[i + 1]
    if f == 'entries-added' then added = v
    elseif f == 'length' then length = v
    elseif f == 'first-entry' and v then first = v[1]
    elseif f == 'last-entry' and v then id = v[1] end
  end
end
if not id then
  local last = redis.call('xrevrange', KEYS[2], '+', '-', 'COUNT', 1)[1]
  id = last and last[1] or '0-0'
end
return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]), id, added, length, first}
`)
