package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		b    float64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{10.5 * 1024 * 1024, "10.5 MiB"},
		{3 << 40, "3.0 TiB"},
		{5 << 60, "5120.0 PiB"},
	} {
		if got := Format(tc.b); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}
