package pulumiexec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

// TestStackLocks: the lock files of a file:// backend are read without
// being touched; a holder that is this process is alive, one that has
// exited is not; another stack's lock is not reported; a non-file backend
// is ErrLocksUnreadable.
func TestStackLocks(t *testing.T) {
	dir := t.TempDir()
	e := &Engine{WorkDir: dir, BackendURL: "file://" + dir}
	host, _ := os.Hostname()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	write := func(stack, id string, pid int, host string, at time.Time) string {
		p := filepath.Join(dir, ".pulumi", "locks", "organization", Project, stack, id+".json")
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		b := []byte(`{"pid":` + strconv.Itoa(pid) + `,"username":"root","hostname":"` + host + `","timestamp":"` + at.Format(time.RFC3339Nano) + `"}`)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("none", func(t *testing.T) {
		locks, err := e.StackLocks("box-1-compute")
		if err != nil || len(locks) != 0 {
			t.Fatalf("locks %v, %v; want none", locks, err)
		}
	})
	p1 := write("box-1-compute", "a", dead.Process.Pid, host, at)
	write("box-1-compute", "b", os.Getpid(), host, at.Add(time.Second))
	write("box-1-data", "c", os.Getpid(), "elsewhere", at)
	before, _ := os.ReadFile(p1)
	t.Run("read without touching", func(t *testing.T) {
		locks, err := e.StackLocks("box-1-compute")
		if err != nil {
			t.Fatal(err)
		}
		if len(locks) != 2 || locks[0].PID != dead.Process.Pid || locks[0].HolderAlive || !locks[0].AcquiredAt.Equal(at) {
			t.Fatalf("first lock %+v, want the exited holder, not alive", locks)
		}
		if !locks[1].HolderAlive || locks[1].Hostname != host {
			t.Fatalf("second lock %+v, want this process, alive", locks[1])
		}
		if after, err := os.ReadFile(p1); err != nil || string(after) != string(before) {
			t.Fatalf("the lock file changed: %v", err)
		}
	})
	t.Run("another host is not alive", func(t *testing.T) {
		locks, err := e.StackLocks("box-1-data")
		if err != nil || len(locks) != 1 || locks[0].HolderAlive {
			t.Fatalf("locks %+v, %v; want one, not alive (its host is not this one)", locks, err)
		}
	})
	t.Run("non-file backend", func(t *testing.T) {
		s3 := &Engine{WorkDir: dir, BackendURL: "s3://bucket"}
		if _, err := s3.StackLocks("box-1-compute"); err != ErrLocksUnreadable {
			t.Fatalf("err %v, want ErrLocksUnreadable", err)
		}
	})
}

// TestViewOf: an export's provider ids and pending operations are read.
func TestViewOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		export  string
		want    StateIDs
		pending int
	}{
		{"empty stack", `{"version":3,"deployment":null}`, StateIDs{}, 0},
		{"droplet and firewall", `{"version":3,"deployment":{"resources":[
			{"urn":"urn:pulumi:s::chalupa::` + typeDroplet + `::box-1","type":"` + typeDroplet + `","id":"42"},
			{"urn":"urn:pulumi:s::chalupa::` + typeFirewall + `::box-1","type":"` + typeFirewall + `","id":"fw-1"}]}}`,
			StateIDs{DropletID: "42", FirewallID: "fw-1"}, 0},
		{"a killed create", `{"version":3,"deployment":{"resources":[
			{"urn":"urn:pulumi:s::chalupa::` + typeFirewall + `::box-1","type":"` + typeFirewall + `","id":"fw-1"}],
			"pending_operations":[{"resource":{"urn":"urn:pulumi:s::chalupa::` + typeDroplet + `::box-1","type":"` + typeDroplet + `"},"type":"creating"}]}}`,
			StateIDs{FirewallID: "fw-1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := viewOf([]byte(tc.export))
			if err != nil {
				t.Fatal(err)
			}
			if !v.Exists || v.IDs != tc.want || len(v.Pending) != tc.pending {
				t.Fatalf("view %+v, want ids %+v and %d pending", v, tc.want, tc.pending)
			}
			if tc.pending > 0 && (v.Pending[0].Kind != "creating" || v.Pending[0].Name != "box-1" || v.Pending[0].Type != typeDroplet) {
				t.Fatalf("pending %+v", v.Pending[0])
			}
		})
	}
}

// TestProcessAliveTreatsZombiesAsDead: a child that exited and was not yet
// reaped (what a killed Pulumi CLI is until init reaps it) holds no lock;
// a running child does; a reaped pid is gone.
func TestProcessAliveTreatsZombiesAsDead(t *testing.T) {
	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	if !processAlive(live.Process.Pid) {
		t.Errorf("a running child (pid %d) reported dead", live.Process.Pid)
	}

	exited := exec.Command("true")
	if err := exited.Start(); err != nil {
		t.Fatal(err)
	}
	pid := exited.Process.Pid
	testwait.Eventually(t, testwait.Short, fmt.Sprintf("child %d to exit (a zombie)", pid), func() (bool, string) {
		return zombie(pid), "still running"
	})
	if processAlive(pid) {
		t.Errorf("an exited, unreaped child (pid %d, a zombie) reported alive", pid)
	}
	_ = exited.Wait()
	if processAlive(pid) {
		t.Errorf("a reaped child (pid %d) reported alive", pid)
	}
}
