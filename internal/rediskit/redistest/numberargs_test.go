package redistest

import (
	"slices"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/internal/rediskit"
)

func TestNumberArgs(t *testing.T) {
	for _, c := range []struct {
		script string
		want   []string
	}{
		{`redis.call('pexpire', k, 2 * ttl)`, []string{"2 * ttl"}},
		{`redis.call('pexpireat', k, math.min(a, b) + 1)`, []string{"math.min(a, b) + 1"}},
		{`redis.call('zrange', q, r + 1, r + 4)`, []string{"r + 1", "r + 4"}},
		{`redis.call('pexpire', o, 86400000)`, []string{"86400000"}},
		{`redis.call('set', k, tonumber(x))`, []string{"tonumber(x)"}},
		{`redis.call('pexpire', o, '86400000')`, nil},
		{`redis.call('pexpire', k, string.format('%.0f', 2 * ttl))`, nil},
		{`redis.call('pexpire', k, string.format('%.0f', r) + 1)`, []string{"string.format('%.0f', r) + 1"}},
		{`redis.call('xrevrange', o, '+', '-', 'COUNT', 1)[1]`, nil},
		{`redis.call('zrange', q, 0, 0)`, nil},
		{`redis.call('publish', ch, h .. ' ' .. n)`, nil},
		{`redis.call('publish', select(4, entry(e)), h)`, nil},
		{`redis.call('hset', w, v, '00 ' .. now .. ' ' .. ttl .. ' ' .. ch)`, nil},
		{"local a = redis.call('get', k)\nlocal b = redis.call('pexpire', k, ARGV[2] * 2)", []string{"ARGV[2] * 2"}},
	} {
		if got := NumberArgs(c.script); !slices.Equal(got, c.want) {
			t.Errorf("NumberArgs(%q) = %q, want %q", c.script, got, c.want)
		}
	}
}

// TestLuaQueue_NoNumberArgs: the queue's and the handoff's Lua pass every
// number they compute to commands as a string (see rediskit.LuaQueue).
func TestLuaQueue_NoNumberArgs(t *testing.T) {
	if got := NumberArgs(rediskit.LuaQueue + rediskit.LuaHandoff); len(got) > 0 {
		t.Errorf("arguments that reach a command as Lua numbers: %q; make them strings with string.format('%%.0f', x)", got)
	}
}

func TestSource(t *testing.T) {
	const src = `return redis.call('get', KEYS[1])`
	if got := Source(goredis.NewScript(src)); got != src {
		t.Errorf("Source = %q, want %q", got, src)
	}
}
