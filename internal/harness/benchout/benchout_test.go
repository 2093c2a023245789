package benchout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.txt")
	t.Setenv(Env, path)
	if err := Write("MoveFigures", Metric{7.5, "fenced-ms"}, Metric{0, "failed-writes"}); err != nil {
		t.Fatal(err)
	}
	if err := Write("MoveFigures", Metric{5, "fenced-ms"}); err != nil {
		t.Fatal(err)
	}
	if err := Write("Bad", Metric{1, "two words"}); err == nil {
		t.Error("a unit with a space: no error")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(raw)
	if strings.Count(got, "goos: ") != 1 {
		t.Errorf("want one goos line:\n%s", got)
	}
	lines := strings.Split(strings.TrimSpace(got), "\n")
	last := strings.Fields(lines[len(lines)-1])
	if !strings.HasPrefix(last[0], "BenchmarkMoveFigures-") || last[1] != "1" || last[2] != "5" || last[3] != "fenced-ms" {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
}

func TestWriteWithoutEnv(t *testing.T) {
	t.Setenv(Env, "")
	if Enabled() {
		t.Error("Enabled without the variable")
	}
	if err := Write("X", Metric{1, "ms"}); err != nil {
		t.Fatal(err)
	}
}
