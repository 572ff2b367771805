package reaper_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/wake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// reapDeployments is how many deployments one run of BenchmarkReapLatency
// reaps (the figure wants at least 20).
const reapDeployments = 25

// BenchmarkReapLatency measures, on the real clock, how long after its
// idle deadline each deployment's droplet is destroyed: the running loop
// (Run) is woken by the deadline signal as a heartbeat would, and the
// latency is dofake's arrival time of the DELETE minus the deadline.
// Deadlines are spread 100 ms apart from 1 s ahead. Reports the median and
// the maximum over every deployment of every run.
//
//	go test -run '^$' -bench BenchmarkReapLatency -benchtime 2x ./reaper/
func BenchmarkReapLatency(b *testing.B) {
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		lat = append(lat, reapOnce(b)...)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(lat)), "deployments")
}

func reapOnce(b *testing.B) []time.Duration {
	b.StopTimer()
	clock := clockwork.NewRealClock()
	db := storagetest.NewDB(b)
	fake := dofake.New(b)
	tok := fake.AddToken("write", dofake.FullAccess...)
	client, err := digitalocean.New(digitalocean.Config{BaseURL: fake.URL, Token: digitalocean.Token(tok), Label: "write"})
	if err != nil {
		b.Fatal(err)
	}
	w := wake.New()
	r := reaper.New(reaper.Config{DB: db, Clock: clock, Credentials: reaper.Platform{Write: client}, Wake: w, Grace: -1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	defer func() { cancel(); <-done }()

	env := storagetest.Environment(b, db, storage.Environment{Slug: "bench"})
	start := time.Now().Truncate(time.Millisecond)
	deadlines := map[string]time.Time{}
	b.StartTimer()
	for i := range reapDeployments {
		id := fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags("bench"), CreatedAt: start.Add(-time.Hour)}).ID
		deadline := start.Add(time.Second + time.Duration(i)*100*time.Millisecond)
		storagetest.Deployment(b, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-" + strconv.Itoa(i), DropletID: int64(id),
			LaunchedAt: start.Add(-time.Hour), IdleDeadlineAt: deadline})
		w.Notify(deadline)
		deadlines["/v2/droplets/"+strconv.Itoa(id)] = deadline
	}
	for len(fake.Deletes()) < reapDeployments {
		if time.Since(start) > time.Minute {
			b.Fatalf("only %d of %d droplets destroyed after a minute", len(fake.Deletes()), reapDeployments)
		}
		time.Sleep(5 * time.Millisecond) // inside the timed region: a fixed, fine poll, not testwait's growing one
	}
	b.StopTimer()
	var lat []time.Duration
	for _, d := range fake.Deletes() {
		lat = append(lat, d.At.Sub(deadlines[d.Path]))
	}
	return lat
}
