package app_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of the Chromium binary, installing Debian's
// package when it is missing and we are root (the test machine's setup).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Geteuid() != 0 {
		t.Fatal("chromium is not installed and the test is not root; install it: apt-get install -y chromium")
	}
	t.Log("chromium missing: apt-get install -y chromium")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "--no-install-recommends", "chromium"}} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium still missing after apt-get install: %v", err)
	}
	return p
}

// headless runs Chromium on url with the flags this machine needs and the
// given action flags, and returns its standard output.
func headless(t *testing.T, bin, url string, action ...string) []byte {
	t.Helper()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(),
		// Let the page's fetches finish before the DOM dump or screenshot.
		"--virtual-time-budget=15000",
	}, action...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(action, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// checkAdminPage loads the admin page in headless Chromium: the DOM must
// show every server and all 2000 shards, the rows table and the user's
// photos with decoded IDs; the screenshot must not be blank.
func checkAdminPage(t *testing.T, f *fixture, userID string, photos int) {
	bin := chromium(t)
	url := f.url + "/admin?once=1&user=" + userID

	dom := string(headless(t, bin, url, "--dump-dom"))
	if !strings.Contains(dom, `data-ready="1"`) {
		t.Fatalf("the admin page did not finish loading its data:\n%.2000s", dom)
	}
	if n := strings.Count(dom, `data-shard="`); n != 2000 {
		t.Errorf("the shard map shows %d shards, want 2000", n)
	}
	for _, name := range serverNames {
		lane := regexp.MustCompile(`class="lane" data-server="` + name + `" data-shards="(\d+)"`).FindStringSubmatch(dom)
		if lane == nil || lane[1] != "1000" {
			t.Errorf("server %s: lane %v, want 1000 shards", name, lane)
		}
		if !strings.Contains(dom, `<tr data-server="`+name+`">`) {
			t.Errorf("rows table has no row for server %s", name)
		}
	}
	if !strings.Contains(dom, "2000 logical shards on 2 servers") {
		t.Errorf("map summary missing")
	}
	if !strings.Contains(dom, fmt.Sprintf("%d photos of user %s", photos, userID)) {
		t.Errorf("the user's photos are not listed: %s", regexp.MustCompile(`id="photosinfo"[^<]*>[^<]*`).FindString(dom))
	}

	shot := filepath.Join(t.TempDir(), "admin.png")
	headless(t, bin, url, "--screenshot="+shot, "--window-size=1280,1400")
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	colours := map[uint32]int{}
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 2 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			colours[r>>8<<16|g>>8<<8|b>>8]++
		}
	}
	// The two servers' colours (#2563eb, #059669) must cover many pixels:
	// 1000 shard cells each.
	for name, c := range map[string]uint32{"alpha": 0x2563eb, "beta": 0x059669} {
		if colours[c] < 500 {
			t.Errorf("server %s's colour #%06x covers %d sampled pixels; the shard map is not drawn", name, c, colours[c])
		}
	}
	if len(colours) < 20 {
		t.Errorf("screenshot has %d distinct colours: blank", len(colours))
	}
	t.Logf("screenshot %dx%d, %d distinct colours", bounds.Dx(), bounds.Dy(), len(colours))
	if dir := os.Getenv("PHOTOS_SCREENSHOT_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "admin.png"), b, 0o644)
	}
}
