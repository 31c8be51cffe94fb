package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// exitCodes returns every exit code exit.go defines, but 0: the codes the
// help of baton run and the README must each list.
func exitCodes(t *testing.T) []int {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "exit.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if i >= len(vs.Values) || !strings.HasPrefix(name.Name, "exit") {
				continue
			}
			lit, ok := vs.Values[i].(*ast.BasicLit)
			if !ok {
				continue
			}
			c, err := strconv.Atoi(lit.Value)
			if err != nil {
				t.Fatalf("%s = %s: %v", name.Name, lit.Value, err)
			}
			if c != exitOK {
				codes = append(codes, c)
			}
		}
		return false
	})
	slices.Sort(codes)
	if len(codes) == 0 {
		t.Fatal("found no exit codes in exit.go")
	}
	return codes
}

// listed returns the codes re finds (its first group), sorted.
func listed(t *testing.T, re *regexp.Regexp, s string) []int {
	t.Helper()
	var codes []int
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		c, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}

// TestRunHelp_ListsEveryExitCodeAndSignal: the help of baton run lists
// every exit code exit.go defines, and names every signal supervise passes
// on to the command.
func TestRunHelp_ListsEveryExitCodeAndSignal(t *testing.T) {
	r := runInProcess("run", "--help")
	if r.code != 0 {
		t.Fatalf("run --help: exit %d: %s", r.code, r.stderr)
	}
	_, table, ok := strings.Cut(r.stdout, "Exit codes:\n")
	if !ok {
		t.Fatalf("run --help has no exit code table:\n%s", r.stdout)
	}
	table, _, _ = strings.Cut(table, "\n\n")
	if got, want := listed(t, regexp.MustCompile(`(?m)^\s+(\d+)\s`), table), exitCodes(t); !slices.Equal(got, want) {
		t.Errorf("run --help lists exit codes %v, exit.go defines %v:\n%s", got, want, table)
	}
	for _, s := range passedOn {
		name := unix.SignalName(s.(syscall.Signal))
		if !strings.Contains(r.stdout, name) {
			t.Errorf("run --help does not say that %s is passed on to the command", name)
		}
	}
}

// TestREADME_ListsEveryExitCode: the README's exit code table lists every
// exit code exit.go defines.
func TestREADME_ListsEveryExitCode(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| exit code | meaning |\n")
	if !ok {
		t.Fatal("README.md has no exit code table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	if got, want := listed(t, regexp.MustCompile(`(?m)^\| (\d+) \|`), table), exitCodes(t); !slices.Equal(got, want) {
		t.Errorf("README.md lists exit codes %v, exit.go defines %v:\n%s", got, want, table)
	}
}
