package approle

import "testing"

func TestValid(t *testing.T) {
	for role, want := range map[string]bool{
		"shardkit_app": true, "_app": true, "app2": true,
		"": false, "2app": false, "App": false, "app-x": false, `a"b`: false, "a'b": false, "a b": false,
		"a23456789012345678901234567890123456789012345678901234567890123":  true,
		"a234567890123456789012345678901234567890123456789012345678901234": false,
	} {
		if got := Valid(role); got != want {
			t.Errorf("Valid(%q) = %v, want %v", role, got, want)
		}
	}
}
