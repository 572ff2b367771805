package main

import "testing"

func TestParsePerfCSV(t *testing.T) {
	for _, tc := range []struct {
		name    string
		text    string
		want    map[string]int64
		wantErr bool
	}{
		{"perf stat -x, output", `429,,timer:hrtimer_start,38213102,100.00,,
8,,timer:hrtimer_cancel,38213102,100.00,,
599,,sched:sched_switch,38213102,100.00,,
`, map[string]int64{"timer:hrtimer_start": 429, "timer:hrtimer_cancel": 8, "sched:sched_switch": 599}, false},
		{"with a blank line and a comment-free preamble", "\n0,,timer:hrtimer_cancel,1,100.00,,\n", map[string]int64{"timer:hrtimer_cancel": 0}, false},
		{"not counted", "<not counted>,,timer:hrtimer_start,0,0.00,,\n", nil, true},
		{"not supported", "<not supported>,,syscalls:sys_enter_futex,0,0.00,,\n", nil, true},
		{"an error message only", "event syntax error: 'timer:nope'\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePerfCSV(tc.text)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %d, want %d", k, got[k], v)
				}
			}
		})
	}
}
