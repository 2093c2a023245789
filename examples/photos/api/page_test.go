package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/shardkit/shardkit/examples/photos/store"
	"github.com/shardkit/shardkit/plugin"
)

func TestStatusOf(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{fmt.Errorf("%w: photo 1", store.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("%w: like", store.ErrConflict), http.StatusConflict},
		{fmt.Errorf("%w: name", store.ErrInvalid), http.StatusBadRequest},
		{&plugin.ShardError{Shard: 3, Err: plugin.ErrMissingShardKey}, http.StatusBadRequest},
		{&plugin.ShardError{Shard: 3, Server: "a", Err: plugin.ErrShardFenced}, http.StatusServiceUnavailable},
		{fmt.Errorf("follow: %w", &plugin.ShardError{Shard: 485, Server: "pg1", Table: "follows", Err: plugin.ErrShardMoved}), http.StatusServiceUnavailable},
		{errors.New("connection reset"), http.StatusInternalServerError},
	}
	for _, c := range cases {
		t.Run(c.err.Error(), func(t *testing.T) {
			if got := statusOf(c.err); got != c.want {
				t.Fatalf("statusOf(%v) = %d, want %d", c.err, got, c.want)
			}
		})
	}
}

func TestPageCursor(t *testing.T) {
	ids := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(100 - i)
		}
		return out
	}
	cases := []struct {
		name  string
		items []int64
		limit int
		want  string
	}{
		{"full page has a next cursor: the last ID", ids(3), 3, "98"},
		{"short page is the last", ids(2), 3, ""},
		{"empty page", nil, 3, ""},
		{"default limit", ids(store.DefaultLimit), 0, fmt.Sprint(100 - store.DefaultLimit + 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := page(c.items, c.limit, func(v int64) int64 { return v })
			if p.NextBefore != c.want {
				t.Fatalf("next_before %q, want %q", p.NextBefore, c.want)
			}
		})
	}
}
