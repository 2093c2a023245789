// Command load drives the photo service with N users, photo uploads,
// likes, follows and feed reads; it prints a progress line while running,
// then throughput and latency percentiles per operation. It exits 1 when
// any request failed.
//
//	go run ./examples/photos/cmd/load -url http://localhost:8080 -users 200 -duration 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/shardkit/shardkit/examples/photos/loadgen"
)

func main() {
	url := flag.String("url", envOr("PHOTOS_URL", "http://localhost:8080"), "base URL of the photo service (env PHOTOS_URL)")
	users := flag.Int("users", 100, "users to create")
	follows := flag.Int("follows", 10, "follows per user")
	workers := flag.Int("workers", 8, "concurrent clients")
	duration := flag.Duration("duration", 30*time.Second, "length of the mixed load after setup")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("load: %d users, %d follows each, %d workers, %s against %s\n", *users, *follows, *workers, *duration, *url)
	res, err := loadgen.Run(ctx, loadgen.Config{URL: *url, Users: *users, Follows: *follows, Workers: *workers,
		Duration: *duration, Progress: os.Stdout})
	res.Print(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if res.Errors > 0 {
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
