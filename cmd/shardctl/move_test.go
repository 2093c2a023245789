package main

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseShardSpec(t *testing.T) {
	cases := []struct {
		spec string
		want []int
		bad  bool
	}{
		{"7", []int{7}, false},
		{"2-4", []int{2, 3, 4}, false},
		{"1,3,5", []int{1, 3, 5}, false},
		{"1,4-6,4", []int{1, 4, 5, 6}, false},
		{"", nil, true},
		{"4-2", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
		{"1,,2", nil, true},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			got, err := parseShardSpec(c.spec)
			if c.bad {
				if !errors.Is(err, errUsage) {
					t.Fatalf("err = %v, want a usage error", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestMoveFlagsExclusive(t *testing.T) {
	for _, args := range [][]string{
		{"move", "--shard", "1", "--catalog", "postgres://x"},
		{"move", "--shard", "1", "--to", "s1", "--resume", "--catalog", "postgres://x"},
		{"rebalance", "--parallel", "0", "--catalog", "postgres://x"},
		{"rebalance", "--by", "weight", "--catalog", "postgres://x"},
	} {
		if code, _, _ := shardctl(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
