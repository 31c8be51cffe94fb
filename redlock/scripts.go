package redlock

import (
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
)

// Each node keeps, for lock K, the same keys as the redis package's
// single-node lock (all in K's Cluster hash slot), but for the observers':
//
//	K        the lock: the holder's value, with PX TTL
//	{K}:q    the wait queue, scored by the waiter's own start time
//	         (microseconds), so that every node orders the same waiters the
//	         same way (see rediskit.LuaQueue)
//	{K}:w    the waiters' entries (see rediskit.LuaQueue)
//
// As on the single node, a release hands each node's key to the first
// live waiter there (rediskit.LuaHandoff) and tells it on its channel,
// naming the attempt of its own the handoff came after. No one node can
// give the lock, which needs a majority: the waiter holds it when a
// majority of the nodes told it so, each after its last attempt there
// (see Acquire), and else looks with a round on every node, which finds
// the keys handed to it its own. A key a holder's expiry, a forced
// release or an undo left free is reserved for the first live waiter.
// Fresh acquisitions do not barge past waiters, and since every node
// orders waiters alike, waiters do not split the vote.
//
// As in the redis package, the paths a contended lock takes on every hold
// come first in the scripts, with few calls: with 5 nodes on the same
// machine as the clients, the nodes' time is what a contended lock runs
// short of.

// luaHelpers follow rediskit.LuaQueue where a script needs them.
const luaHelpers = `
local function notify_head(q, w)
  local h, e = live_head(q, w, clock())
  if h then redis.call('publish', select(4, entry(e)), h) end
end
`

// acquireScript sets K to ARGV[1] with TTL ARGV[2] ms when it is free and
// no live waiter is before us. With ARGV[3] = "1" it joins (or refreshes
// its place in) the queue with score ARGV[4] and ARGV[5], the attempt's
// number and the channel to be told on (rediskit.Tell), when it cannot.
// It returns {1} when K holds our value, else {0, V, PTTL, HEAD} as in
// the redis package.
//
// ARGV[6] is "1" after a claim (see claim) set K to ARGV[1] but found a
// queue: when a live waiter is first, K was free but reserved for it. The
// script then answers {0, WAITER, -2, 0, 1}: not held, and K yielded, but
// still ours; the caller undoes it, unless it holds a majority without it.
// When K no longer holds ARGV[1] (a copy that arrived late), it only
// answers: a late copy changes nothing.
//
// ARGV[7] and on are values the acquisition used before and gave up (see
// Acquire). Where K still holds one (an undo that has not landed, or an
// attempt that landed late), the script first makes K ours, with our TTL;
// where one is queued, it puts ours in its place, with its entry, at our
// score (ARGV[4], one per acquisition, so the old one's too). So nothing
// of the old values stays behind to block the node, and the waiter keeps
// its turn. A K made ours takes ours out of the queue, as every way of
// taking K does: an undo's handoff would otherwise find ours first in
// line and hand K back to the value it gave up.
//
// First come the cases of a contended lock, before the helpers are
// defined: K ours already; K held by another, where a waiter joins the
// queue and learns from its rank whether it is first, or, refreshing its
// place, from the first live entry (so one behind a waiter that crashed
// learns it is first at its next refresh); PTTL, which only a first waiter
// uses, is 0 for the others; K free with us, or no one, first in the
// queue (our own entry needs no liveness check).
var acquireScript = goredis.NewScript(rediskit.LuaQueue + `
local k, q, w = KEYS[1], KEYS[2], KEYS[3]
local v, wait = ARGV[1], ARGV[3] == '1'
if #ARGV > 6 then
  local cur = redis.call('get', k)
  for i = 7, #ARGV do
    local old = ARGV[i]
    if cur == old then
      redis.call('set', k, v, 'px', ARGV[2])
      leave(q, w, v)
      cur = v
    end
    if redis.call('zrem', q, old) == 1 then
      local e = redis.call('hget', w, old)
      redis.call('hdel', w, old)
      if e and cur ~= v then
        redis.call('zadd', q, ARGV[4], v)
        redis.call('hset', w, v, e)
      end
    end
  end
end
if ARGV[6] ~= '1' then
  local cur = redis.call('get', k)
  if cur == v then
    redis.call('pexpire', k, ARGV[2])
    return {1}
  end
  if cur then
    if wait and join_first(q, w, v, clock(), ARGV[4], ARGV[2], ARGV[5]) then
      return {0, cur, redis.call('pttl', k), 1}
    end
    return {0, cur, 0, 0}
  end
  local h = redis.call('zrange', q, 0, 0)[1]
  if not h or h == v then
    take(k, q, w, v, ARGV[2], h)
    return {1}
  end
end
local now = clock()
if ARGV[6] == '1' then
  local cur = redis.call('get', k)
  if cur ~= v then
    return {0, cur or '', redis.call('pttl', k), 0}
  end
  local h = live_head(q, w, now)
  if not h then return {1} end
  return {0, h, -2, 0, 1}
end
local cur = redis.call('get', k)
if cur == v then
  redis.call('pexpire', k, ARGV[2])
  return {1}
end
local head = live_head(q, w, now)
if not cur and (not head or head == v) then
  take(k, q, w, v, ARGV[2], head)
  return {1}
end
local first = 0
if wait then
  join(q, w, v, now, ARGV[4], ARGV[2], ARGV[5])
  if redis.call('zrank', q, v) == 0 or head == v then first = 1 end
  return {0, cur or head or '', redis.call('pttl', k), first}
end
if head == v then first = 1 end
return {0, cur or head or '', redis.call('pttl', k), first}
`)

// unlockScript frees K if it holds one of the values ARGV[3] and on (an
// acquisition's, and those it gave up: see Acquire). With ARGV[1] = "1" it
// also takes them all out of the queue, before it looks for a waiter.
// With ARGV[2] = "1" it hands K to the first live waiter (see
// rediskit.LuaHandoff), or deletes it when there is none; or, when K was
// not ours but one of the values was the first live waiter in the queue
// (first in line, or behind entries that all ran out), tells the live
// waiter first now (it then looks at K's expiry itself: a waiter that is
// not first sleeps up to RenewEvery). With ARGV[2] = "0"
// it is the undo of an acquisition that is first in line and tries again
// at once: it deletes K when no other live waiter is first there, and
// else hands K to that waiter, whom no one would tell otherwise (taking K
// took us out of the queue, so a free K would be reserved for that
// waiter, which sleeps). It returns 1 when K was ours. A lock with no queue is done
// with before the helpers are defined (each definition makes a closure,
// on every run).
var unlockScript = goredis.NewScript(`
local k, q, w = KEYS[1], KEYS[2], KEYS[3]
local cur = redis.call('get', k)
local ours = false
for i = 3, #ARGV do
  if cur == ARGV[i] then ours = true end
end
if redis.call('exists', q) == 0 then
  if not ours then return 0 end
  redis.call('del', k)
  return 1
end
local first, behind = false, false
if ARGV[1] == '1' then
  local h = not ours and redis.call('zrange', q, 0, 0)[1]
  for i = 3, #ARGV do
    if h == ARGV[i] then first = true end
  end
  if not ours and not first and ARGV[2] == '1' then
    for i = 3, #ARGV do
      if redis.call('zscore', q, ARGV[i]) then behind = true end
    end
  end
  if not behind then
    for i = 3, #ARGV do
      if redis.call('zrem', q, ARGV[i]) == 1 then redis.call('hdel', w, ARGV[i]) end
    end
  end
end
if not ours and not ((first or behind) and ARGV[2] == '1') then
  return 0
end
` + rediskit.LuaQueue + luaHelpers + rediskit.LuaHandoff + `
if ours then
  if ARGV[2] ~= '1' then
    local h = live_head(q, w, (clock()))
    local keep = not h
    for i = 3, #ARGV do
      if h == ARGV[i] then keep = true end
    end
    if keep then
      redis.call('del', k)
      return 1
    end
  end
  if not handoff(k, q, w, false) then redis.call('del', k) end
  return 1
end
if behind then
  local h = live_head(q, w, (clock()))
  local head = false
  for i = 3, #ARGV do
    if h == ARGV[i] then head = true end
    leave(q, w, ARGV[i])
  end
  if not head then return 0 end
end
notify_head(q, w)
return 0
`)

// renewScript is compare-and-PEXPIRE: 1 when renewed, 0 when K is gone or
// holds another value.
var renewScript = goredis.NewScript(`
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
`)

// forceScript deletes K if it still holds ARGV[1], the value the caller
// read there, whoever that is, tells the first waiter, and returns 1;
// else it returns 0 and changes nothing, so that a copy of the request
// that arrives late cannot delete a later holder's key.
var forceScript = goredis.NewScript(rediskit.LuaQueue + luaHelpers + `
local k, q, w = KEYS[1], KEYS[2], KEYS[3]
if redis.call('get', k) ~= ARGV[1] then return 0 end
redis.call('del', k)
if redis.call('exists', q) == 1 then notify_head(q, w) end
return 1
`)
