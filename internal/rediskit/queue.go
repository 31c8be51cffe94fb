package rediskit

import (
	"strconv"
	"strings"
)

// LuaQueue is the Lua that the redis and redlock backends' scripts begin
// with: the wait queue both keep for a lock K, and its entries.
//
//	{K}:q    the queue: a sorted set of waiters' values, in the order they
//	         are served (the redis package scores by arrival, server time
//	         in microseconds; redlock by the acquisition's start, so that
//	         every node orders the same waiters the same way)
//	{K}:w    the entries: value -> "00 SEEN_MS TTL_MS ATTEMPT CHANNEL",
//	         where SEEN_MS is the server's time at the waiter's last
//	         attempt, TTL_MS its lease TTL (the entry runs out at SEEN_MS +
//	         TTL_MS unless refreshed), ATTEMPT the number the waiter gave
//	         that attempt, which a handoff names (see LuaHandoff), and
//	         CHANNEL is where it is told; an attempt passes "ATTEMPT
//	         CHANNEL" as one argument (see Tell)
//
// q and w are changed together, always, and expire together, at most
// 2 * TTL after the last join. The leading 00 marks the entries' format.
// Earlier versions stored "0 SEEN_MS TTL_MS CHANNEL", and before that
// "SEEN_MS TTL_MS CHANNEL", "DEADLINE_MS TTL_MS CHANNEL" (redis) and
// "DEADLINE_MS CHANNEL" (redlock). Each of them reads this format as run
// out (as a deadline or a SEEN_MS of 0, or as no match), as these
// functions read theirs. So in a fleet of mixed versions a waiter may
// lose its place and join again, and never is an entry taken for live
// after it ran out.
//
// The functions are written for the server's time, which a contended lock
// spends on its scripts: each redis.call costs 1.5 to 3us, and a Lua
// number made a string (a command's argument, a concatenation) as much
// again, so times are built from TIME's strings, not from numbers.
//
// A number a script computes reaches a command as a string made by
// string.format('%.0f', x), never as a Lua number: Redis 7.2.0 to 7.2.4
// write a Lua number argument divisible by 10^8 in exponent form (2e+08),
// which commands refuse as not an integer (redis/redis#13113), and a
// script that fails halfway keeps what it wrote (a handoff's key set,
// its expiry not). redistest.NumberArgs checks the scripts for it.
//
//	clock()            the server's time as strings: milliseconds, and
//	                   microseconds (an arrival score)
//	entry(e)           SEEN_MS, TTL_MS, ATTEMPT and CHANNEL of entry e, or
//	                   nil for another format
//	live(e, now)       whether entry e has not run out at now (ms)
//	live_head(q, w, now)
//	                   the first live waiter and its entry, dropping the
//	                   dead ones before it; false when none
//	join(q, w, v, now, score, ttl, ch)
//	                   queues v with score, or keeps its place, and
//	                   refreshes its entry (ch: "ATTEMPT CHANNEL"); 1
//	                   when v was not queued. A refresh drops the entries
//	                   that ran out among the four behind v: the head
//	                   drops dead entries ahead of every live one
//	                   (live_head), each live waiter those behind it, a
//	                   few at each refresh
//	join_first(q, w, v, now, score, ttl, ch)
//	                   join, and whether v is first: by its rank when it
//	                   was not queued, else by the first live entry (which
//	                   drops dead ones ahead)
//	leave(q, w, v)     takes v out of the queue
//	take(k, q, w, v, ttl, queued)
//	                   sets the lock k to v for ttl ms, and takes v out of
//	                   the queue when it was queued
const LuaQueue = `
local function clock()
  local t = redis.call('time')
  local us = string.rep('0', 6 - #t[2]) .. t[2]
  return t[1] .. string.sub(us, 1, 3), t[1] .. us
end

local function entry(e)
  return string.match(e, '^00 (%d+) (%d+) (%d+) (.+)$')
end

local function live(e, now)
  local seen, ttl = entry(e)
  return seen and tonumber(seen) + tonumber(ttl) > tonumber(now)
end

local function leave(q, w, v)
  redis.call('zrem', q, v)
  redis.call('hdel', w, v)
end

local function live_head(q, w, now)
  while true do
    local h = redis.call('zrange', q, 0, 0)[1]
    if not h then return false, false end
    local e = redis.call('hget', w, h)
    if e and live(e, now) then return h, e end
    leave(q, w, h)
  end
end

local function join(q, w, v, now, score, ttl, ch)
  local added = redis.call('zadd', q, 'NX', score, v)
  redis.call('hset', w, v, '00 ' .. now .. ' ' .. ttl .. ' ' .. ch)
  if redis.call('pttl', q) < tonumber(ttl) then
    local twice = string.format('%.0f', 2 * ttl)
    redis.call('pexpire', q, twice)
    redis.call('pexpire', w, twice)
  end
  if added == 0 then
    local r = redis.call('zrank', q, v)
    for _, h in ipairs(redis.call('zrange', q, string.format('%.0f', r + 1), string.format('%.0f', r + 4))) do
      local e = redis.call('hget', w, h)
      if not (e and live(e, now)) then leave(q, w, h) end
    end
  end
  return added
end

local function join_first(q, w, v, now, score, ttl, ch)
  if join(q, w, v, now, score, ttl, ch) == 1 then
    return redis.call('zrank', q, v) == 0
  end
  return live_head(q, w, now) == v
end

local function take(k, q, w, v, ttl, queued)
  redis.call('set', k, v, 'px', ttl)
  if queued then leave(q, w, v) end
end
`

// LuaHandoff, after LuaQueue, defines handoff(k, q, w, skip): the function by
// which a release hands lock k to the first live waiter in queue q (see
// its comment). The redis backend's release and forced release use it;
// redlock's release, on each node.
const LuaHandoff = `
-- handoff takes the first live waiter out of the queue (and the dead ones
-- before it), gives it the lock, overwriting the key's value, which its
-- callers checked (the releasing holder's, or the one a forced release
-- read), and tells it on its channel: "VALUE ATTEMPT", ATTEMPT the number
-- of the last attempt that wrote its entry, so that the waiter knows
-- which of its attempts the handoff came after. The key expires when the
-- entry would have, at an absolute time (PEXPIREAT: a relative PX counts
-- from the script's start on Redis 7.2 and later, which may be a
-- millisecond or a stall before TIME said now): SEEN plus its TTL and a
-- millisecond for SEEN's rounding down, so past the waiter's deadline,
-- which counts from that attempt's send time, and no later, so that a
-- waiter gone since its last attempt blocks the lock no longer than its
-- entry did (or than one TTL, should the clock have stepped back since
-- SEEN). skip, the value the key held (or false), is never handed the
-- lock: an entry of its own, which the holder's acquisition may have left
-- (a copy of its claim that took the lock late, while it waited), is taken
-- out like a dead one. It returns the new holder's value, or false when
-- no other waiter was live.
local function handoff(k, q, w, skip)
  local now = clock()
  while true do
    local h = redis.call('zpopmin', q)[1]
    if not h then return false end
    local e = redis.call('hget', w, h)
    redis.call('hdel', w, h)
    if e and h ~= skip and live(e, now) then
      local seen, ttl, n, ch = entry(e)
      redis.call('set', k, h)
      redis.call('pexpireat', k, string.format('%.0f', math.min(tonumber(seen), tonumber(now)) + tonumber(ttl) + 1))
      redis.call('publish', ch, h .. ' ' .. n)
      return h
    end
  end
end
`

// Tell is the argument by which a waiter's attempt numbered attempt (a
// decimal number), told on channel, joins a queue: entries keep it (see
// LuaQueue), and a handoff names the number (see LuaHandoff). A waiter
// numbers its attempts so that no two of one acquisition share a number:
// a handoff's message then says which attempt it came after, whatever the
// servers' clocks do.
func Tell(attempt, channel string) string {
	return attempt + " " + channel
}

// LiveWaiters counts the entries of a lock's {K}:w (see LuaQueue) that
// have not run out at nowMS, the server's time in milliseconds: the
// waiters still waiting, where the queue's length also counts those that
// died and are not yet dropped. An entry in another format counts as run
// out, as the scripts read it.
func LiveWaiters(entries []string, nowMS int64) int {
	n := 0
	for _, e := range entries {
		f := strings.SplitN(e, " ", 4)
		if len(f) < 4 || f[0] != "00" {
			continue
		}
		seen, err1 := strconv.ParseInt(f[1], 10, 64)
		ttl, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil && seen+ttl > nowMS {
			n++
		}
	}
	return n
}
