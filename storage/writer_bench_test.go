//go:build linux

package storage_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// BenchmarkWriterHeartbeat runs the statements of one accepted heartbeat
// (ingest's writer unit: claim the nonce, recheck the key, update the
// deployment (creating it the first time) and store the heartbeat) through
// Writer.Do on a migrated database, without HTTP, JSON or replication:
// the writer's own cost per unit.
//
//	go test -run XXX -bench WriterHeartbeat -benchmem -cpu 1,2 ./storage
//
// cpu-µs/op is the process's user+system CPU per unit (SQLite, WAL writes,
// fsync); batch is units per COMMIT.
func BenchmarkWriterHeartbeat(b *testing.B) {
	for _, bc := range []struct {
		name     string
		inFlight int
	}{{"serial", 1}, {"64-in-flight", 64}} {
		b.Run(bc.name, func(b *testing.B) {
			db := storagetest.NewDB(b)
			env := storagetest.Environment(b, db, storage.Environment{})
			key := storagetest.IngestKey(b, db, storage.IngestKey{EnvironmentID: env.ID})
			nonces := make([]string, b.N)
			buf := make([]byte, 24)
			for i := range nonces {
				_, _ = rand.Read(buf)
				nonces[i] = base64.RawURLEncoding.EncodeToString(buf)
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			var next atomic.Int64
			unit := func() error {
				i := next.Add(1) - 1
				ctx := context.Background()
				dep := "dep-" + strconv.FormatInt(i%500, 10)
				return db.Writer.Do(ctx, func(tx storage.Tx) error {
					if err := storage.ClaimNonce(ctx, tx, key.KeyID, nonces[i], now); err != nil {
						return err
					}
					if st, err := storage.IngestKeyStatus(ctx, tx, key.KeyID); err != nil || st == storage.KeyRevoked {
						return fmt.Errorf("key status %q: %v", st, err)
					}
					_, err := storage.ApplyHeartbeat(ctx, tx, storage.Heartbeat{
						DeploymentID: dep, EnvironmentID: env.ID, KeyID: key.KeyID,
						ReceivedAt: now, SentAt: now, AgentVersion: "bench/1", DropletID: 400000000 + i%500,
						Region: "nyc3", Size: "s-2vcpu-4gb", IdleChecks: i, LimitMinutes: 30,
						LastActivityAt: now.Add(-2 * time.Minute), IdleDeadlineAt: now.Add(28 * time.Minute),
					})
					return err
				})
			}
			runtime.GC()
			c0, u0 := db.Writer.Stats()
			cpu0 := cpuTime()
			var failed atomic.Int64
			b.ResetTimer()
			if bc.inFlight == 1 {
				for range b.N {
					if err := unit(); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(max(1, bc.inFlight/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := unit(); err != nil {
							failed.Add(1)
						}
					}
				})
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			c1, u1 := db.Writer.Stats()
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d of %d units failed", n, b.N)
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			if c1 > c0 {
				b.ReportMetric(float64(u1-u0)/float64(c1-c0), "batch")
			}
		})
	}
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
