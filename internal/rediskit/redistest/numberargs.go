package redistest

import (
	"context"
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// NumberArgs returns the arguments of script's redis.call calls that may
// reach the command as a Lua number: an arithmetic expression, a call of
// math.* or tonumber, or a numeric literal of eight digits or more. Redis
// 7.2.0 to 7.2.4 write such a number, when divisible by 10^8, in exponent
// form, which commands refuse as not an integer (redis/redis#13113); the
// scripts make every computed number a string with string.format first
// (see rediskit.LuaQueue), and the backends' tests check them with this.
// An argument that is a call of string.format, or a quoted string, is
// fine. It reads the text of each argument alone, as the scripts are
// written (every call of redis.call spelled so, its arguments balanced):
// a number computed into a variable first, or passed in as a function's
// parameter, gets past it.
func NumberArgs(script string) []string {
	var out []string
	for i := 0; ; {
		j := strings.Index(script[i:], "redis.call(")
		if j < 0 {
			return out
		}
		args, end := splitArgs(script, i+j+len("redis.call("))
		for _, a := range args[min(1, len(args)):] { // the first is the command's name
			if numberArg(a) {
				out = append(out, a)
			}
		}
		i = end
	}
}

// NoNumberArgs fails tb for each of scripts, by name, that passes a
// number it computes to a command as a Lua number (see NumberArgs).
func NoNumberArgs(tb testing.TB, scripts map[string]*goredis.Script) {
	tb.Helper()
	for name, s := range scripts {
		src := Source(s)
		if !strings.Contains(src, "redis.call(") {
			tb.Errorf("%s script: no redis.call in its source %q: nothing checked", name, src)
		}
		if got := NumberArgs(src); len(got) > 0 {
			tb.Errorf("%s script: arguments that reach a command as Lua numbers: %q; make them strings with string.format('%%.0f', x)", name, got)
		}
	}
}

// splitArgs splits the argument list that starts at s[start], just past
// an opening parenthesis, at its top-level commas, and returns the
// arguments, trimmed, and the index just past the closing parenthesis.
func splitArgs(s string, start int) (args []string, end int) {
	depth, from := 0, start
	for i := start; i < len(s); i++ {
		switch c := s[i]; c {
		case '\'', '"':
			if k := strings.IndexByte(s[i+1:], c); k >= 0 {
				i += k + 1
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			if depth == 0 {
				return append(args, strings.TrimSpace(s[from:i])), i + 1
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[from:i]))
				from = i + 1
			}
		}
	}
	return append(args, strings.TrimSpace(s[from:])), len(s)
}

// numberArg reports whether the argument a may be a Lua number (see
// NumberArgs).
func numberArg(a string) bool {
	if strings.HasPrefix(a, "string.format(") {
		if _, end := splitArgs(a, len("string.format(")); end == len(a) {
			return false // the call is the whole argument
		}
	}
	bare := unquoted(a)
	if bare != "" && strings.Trim(bare, "0123456789") == "" {
		return len(bare) >= 8
	}
	return strings.ContainsAny(bare, "+-*/%") || strings.Contains(bare, "math.") || strings.Contains(bare, "tonumber(")
}

// unquoted returns a without its quoted strings.
func unquoted(a string) string {
	var b strings.Builder
	for i := 0; i < len(a); i++ {
		c := a[i]
		if c == '\'' || c == '"' {
			if k := strings.IndexByte(a[i+1:], c); k >= 0 {
				i += k + 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Source returns the Lua of s, which go-redis keeps to itself: it has s
// build its EVAL on a client that sends nothing and keeps the command.
func Source(s *goredis.Script) string {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:0"})
	defer c.Close()
	var src string
	c.AddHook(captureHook{func(args []any) {
		if len(args) > 1 {
			src, _ = args[1].(string)
		}
	}})
	_ = s.Eval(context.Background(), c, nil).Err() // the hook answers it
	return src
}

// captureHook hands every command's arguments to keep and sends none.
type captureHook struct{ keep func(args []any) }

func (h captureHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h captureHook) ProcessHook(goredis.ProcessHook) goredis.ProcessHook {
	return func(_ context.Context, cmd goredis.Cmder) error {
		h.keep(cmd.Args())
		return errCaptured
	}
}

func (h captureHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

var errCaptured = errors.New("redistest: command captured, not sent")
