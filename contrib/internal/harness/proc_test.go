package harness

import (
	"os"
	"testing"
)

// statusText is a trimmed /proc/<pid>/task/<tid>/status.
const statusText = `Name:	chalupa
Umask:	0022
State:	S (sleeping)
Tgid:	20557
Pid:	20561
Threads:	10
VmRSS:	   26228 kB
Cpus_allowed_list:	0
voluntary_ctxt_switches:	473
nonvoluntary_ctxt_switches:	55
`

func TestStatusField(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int64
		ok   bool
	}{
		{"VmRSS", 26228, true},
		{"Threads", 10, true},
		{"voluntary_ctxt_switches", 473, true},
		{"nonvoluntary_ctxt_switches", 55, true},
		{"Tgid", 20557, true},
		{"State", 0, false}, // not a number
		{"VmSwap", 0, false},
		{"ctxt_switches", 0, false}, // only whole names match
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := StatusField(statusText, tc.name)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %d %v, want %d %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseSwitches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		text    string
		want    Switches
		wantErr bool
	}{
		{"task status", statusText, Switches{473, 55}, false},
		{"zeros", "voluntary_ctxt_switches:\t0\nnonvoluntary_ctxt_switches:\t0\n", Switches{}, false},
		{"no trailing newline", "voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t3", Switches{7, 3}, false},
		{"one missing", "voluntary_ctxt_switches:\t7\n", Switches{}, true},
		{"empty", "", Switches{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSwitches(tc.text)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestSwitchesDelta(t *testing.T) {
	for _, tc := range []struct {
		name       string
		start, end map[int]Switches
		want       Switches
		vanished   int
	}{
		{"same threads", map[int]Switches{1: {10, 1}, 2: {20, 2}}, map[int]Switches{1: {15, 1}, 2: {30, 4}}, Switches{15, 2}, 0},
		{"a thread appeared: counted from zero", map[int]Switches{1: {10, 1}}, map[int]Switches{1: {12, 1}, 3: {5, 1}}, Switches{7, 1}, 0},
		{"a thread vanished: its switches are lost", map[int]Switches{1: {10, 1}, 2: {99, 9}}, map[int]Switches{1: {11, 1}}, Switches{1, 0}, 1},
		{"nothing happened", map[int]Switches{1: {10, 1}}, map[int]Switches{1: {10, 1}}, Switches{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, vanished := SwitchesDelta(tc.start, tc.end)
			if got != tc.want || vanished != tc.vanished {
				t.Errorf("got %+v, %d vanished; want %+v, %d", got, vanished, tc.want, tc.vanished)
			}
			if got.Total() != tc.want.Voluntary+tc.want.Nonvoluntary {
				t.Errorf("Total %d", got.Total())
			}
		})
	}
}

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		stat string
		want float64
		ok   bool
	}{
		{"plain", "1234 (chalupa) S 1 1234 1234 0 -1 4194560 2583 0 0 0 150 37 0 0 20 0 10 0 7010 1300000000 6557", 187, true},
		{"name with spaces and parens", "99 (a b) c) R 1 99 99 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 1 1 1", 11, true},
		{"truncated", "99 (x) R 1 2 3", 0, false},
		{"no name", "garbage", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStatCPU(tc.stat)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %v %v, want %v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestReadTaskSwitchesOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	m, err := ReadTaskSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(m) == 0 {
		t.Fatal("no threads")
	}
	if _, ok := m[os.Getpid()]; !ok {
		t.Errorf("the main thread (tid = pid) is missing: %v", m)
	}
}
