package harness

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"0", []int{0}, false},
		{"0,1", []int{0, 1}, false},
		{" 1, 0 ", []int{0, 1}, false},
		{"0-3,6", []int{0, 1, 2, 3, 6}, false},
		{"2,0-2", []int{0, 1, 2}, false},
		{"3-1", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
		{"0,", nil, true},
		{"1024", nil, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPUList(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFormatCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{0}, "0"},
		{[]int{0, 1}, "0-1"},
		{[]int{0, 2}, "0,2"},
		{[]int{0, 1, 2, 5, 7, 8}, "0-2,5,7-8"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := FormatCPUList(tc.in); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			back, err := ParseCPUList(tc.want)
			if err != nil || !slices.Equal(back, tc.in) {
				t.Errorf("round trip: %v, %v", back, err)
			}
		})
	}
}

func TestWithout(t *testing.T) {
	for _, tc := range []struct {
		name      string
		all, drop []int
		want      []int
	}{
		{"two cores, server on 0", []int{0, 1}, []int{0}, []int{1}},
		{"server on both", []int{0, 1}, []int{0, 1}, nil},
		{"nothing dropped", []int{0, 1, 2}, nil, []int{0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Without(tc.all, tc.drop); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPinProcess pins a child copy of the test binary (so this process
// keeps its placement) to one CPU, with threads busy meanwhile, and checks
// every thread of it ended up there.
func TestPinProcess(t *testing.T) {
	if os.Getenv("HARNESS_PIN_CHILD") == "1" {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 { // threads that exist, and keep being created, while pinning
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				<-stop
			}()
		}
		err := PinProcess([]int{0})
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		got, err := ThreadCPUs(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []int{0}) {
			t.Fatalf("threads may run on %v after pinning to [0]", got)
		}
		return
	}
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	allowed, err := AllowedCPUs()
	if err != nil || !slices.Contains(allowed, 0) {
		t.Skipf("CPU 0 not available here (%v, %v)", allowed, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPinProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HARNESS_PIN_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
