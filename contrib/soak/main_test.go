package main

import "testing"

func TestEnvFlag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr bool
	}{
		{"CHALUPA_MAX_CONNS=1000", false},
		{"GODEBUG=gctrace=1", false},
		{"EMPTY=", false},
		{"NOVALUE", true},
		{"=x", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var e envFlag
			err := e.Set(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && e.String() != tc.in {
				t.Errorf("String() = %q", e.String())
			}
		})
	}
}
