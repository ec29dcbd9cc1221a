package consort

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func goTool(t *testing.T) string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	if g, err := exec.LookPath("go"); err == nil {
		return g
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// The README's Go block, line for line, is a part of examples/hello, and
// examples/hello, built, hears its cast come back from a real daemon; every
// example builds.
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n```go\n")
	if !ok {
		t.Fatal("README.md has no ```go block")
	}
	block, _, _ := strings.Cut(after, "\n```\n")
	src, err := os.ReadFile("examples/hello/main.go")
	if err != nil {
		t.Fatal(err)
	}
	trim := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			out = append(out, strings.TrimSpace(l))
		}
		return out
	}
	want := strings.Join(trim(block), "\n")
	if len(strings.TrimSpace(want)) < 100 || !strings.Contains(strings.Join(trim(string(src)), "\n"), want) {
		t.Fatalf("README's Go block is not a part of examples/hello/main.go:\n%s", block)
	}
	dir := t.TempDir()
	for _, ex := range []string{"hello", "logmember"} {
		out, err := exec.Command(goTool(t), "build", "-o", filepath.Join(dir, ex), "./examples/"+ex).CombinedOutput()
		if err != nil {
			t.Fatalf("go build ./examples/%s: %v\n%s", ex, err, out)
		}
	}
	sock := startDaemon(t)
	out, err := exec.Command(filepath.Join(dir, "hello"), sock).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), ": hello") {
		t.Fatalf("hello: %v: %s", err, out)
	}
}
