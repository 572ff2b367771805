package slug

import "testing"

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"demo-harbor", true}, {"a1", true}, {"0-0", true},
		{"a", false}, {"", false}, {"-demo", false}, {"Demo", false}, {"demo_x", false},
		{"a" + string(make([]byte, 0)) + "12345678901234567890123456789012345678901234567890123456789012", true},
		{"a1234567890123456789012345678901234567890123456789012345678901234", false},
		{"demo\n", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := Valid(tc.in); got != tc.want {
				t.Errorf("Valid(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}
