package reaper_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/digitalocean"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/reaper"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// seeded is one random deployment and what the oracle knows of it.
type seeded struct {
	env       storage.Environment
	customer  bool
	dep       storage.Deployment
	droplet   int64    // 0: none in the provider
	tags      []string // the droplet's tags
	reported  bool     // the deployment reported the droplet id
	due       bool     // by the rules, independently of the code
	reapable  bool     // due, platform scope, droplet tagged for its environment
	createdAt time.Time
}

// TestReaperProperty: over random fleets (tags, organizations, deadlines,
// CI flags, droplets missing or unreported, and on odd seeds a customer
// organization with its own token and sweep), every DELETE the provider
// saw was for a due, chalupa-tagged droplet of the deployment's own
// environment, sent with the right token: the write token for the
// platform's deployments, the customer's own for its; every due deployment
// in a swept scope ends up ended or warned about; nothing else is touched.
func TestReaperProperty(t *testing.T) {
	// The full run checks 25 fleets; the fast lane (-short) the first 5,
	// an odd one (a customer sweep) among them.
	seeds := uint64(25)
	if testing.Short() {
		seeds = 5
	}
	for seed := range seeds {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5eed))
			f := newFixture(t)
			org := customerOrg(t, f.db, "acme")
			// swept: the customer holds a token, so its deployments are
			// the customer sweep's.
			swept := seed%2 == 1
			if swept {
				cf := armCustomerSweep(f, nil)
				cf.setToken("acme", "cust-acme")
				f = cf.fixture
			}
			envs := []storage.Environment{f.env("alpha"), f.env("beta"),
				storageEnv(t, f, "acme-dev", org)}
			var fleet []*seeded
			for i := range 12 + rng.IntN(12) {
				s := &seeded{env: envs[rng.IntN(len(envs))]}
				s.customer = s.env.OrgID != storage.PlatformOrgID
				s.dep.ID = fmt.Sprintf("dep-%d", i)
				s.dep.LaunchedAt = t0.Add(-2 * time.Hour)
				// Deadlines: past or future, with or without a session.
				s.dep.IdleDeadlineAt = t0.Add(time.Duration(rng.IntN(41)-20) * time.Minute)
				if rng.IntN(3) == 0 {
					s.dep.SessionExpiresAt = t0.Add(time.Duration(rng.IntN(41)-20) * time.Minute)
				}
				// CI: none, fresh or stale.
				s.dep.LastHeartbeatAt = s.dep.LaunchedAt.Add(time.Duration(rng.IntN(120)) * time.Minute)
				s.dep.CIActive = rng.IntN(2) == 0
				// The droplet: tagged for its environment, untagged,
				// chalupa only, another environment's, or missing.
				switch rng.IntN(6) {
				case 0:
					s.tags = dofake.NoTags
				case 1:
					s.tags = []string{digitalocean.TagChalupa}
				case 2:
					s.tags = dofake.EnvTags(envs[rng.IntN(len(envs))].Slug)
				case 3:
					s.tags = nil // no droplet at all
				default:
					s.tags = dofake.EnvTags(s.env.Slug)
				}
				if s.tags != nil {
					s.createdAt = s.dep.LaunchedAt.Add(-time.Minute)
					s.droplet = int64(f.fake.AddDroplet(dofake.Droplet{Tags: s.tags, CreatedAt: s.createdAt}).ID)
				}
				s.reported = s.droplet != 0 && rng.IntN(4) != 0
				if s.reported {
					s.dep.DropletID = s.droplet
				} else if s.tags == nil && rng.IntN(2) == 0 {
					s.dep.DropletID = 900000000 + int64(i) // reported, but gone
					s.reported = true
				}
				s.dep = f.deployment(s.env, s.dep)
				sess := !s.dep.SessionExpiresAt.IsZero() && !s.dep.SessionExpiresAt.After(t0)
				idle := !s.dep.IdleDeadlineAt.After(t0) && !(s.dep.CIActive && s.dep.LastHeartbeatAt.Add(reaper.DefaultCIFreshness).After(t0))
				s.due = sess || idle
				s.reapable = s.due && (!s.customer || swept) && s.droplet != 0 && hasBoth(s.tags, s.env.Slug)
				fleet = append(fleet, s)
			}

			for range 10 {
				res, err := f.r.Tick(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Outcomes) == 0 {
					break
				}
			}

			// Each DELETE: the write token, and a droplet tagged chalupa and
			// chalupa:env:<slug> of the deployment that ended with it, which
			// was due and in the platform's scope.
			tagsOf := map[string][]string{}
			for _, s := range fleet {
				if s.droplet != 0 {
					tagsOf[strconv.FormatInt(s.droplet, 10)] = s.tags
				}
			}
			endedWith := map[string]*seeded{}
			for _, s := range fleet {
				if c := f.candidate(s.env.ID, s.dep.ID); c.Status == storage.DeploymentEnded && c.DropletID != 0 {
					endedWith[strconv.FormatInt(c.DropletID, 10)] = s
				}
			}
			for _, d := range f.fake.Deletes() {
				id := strings.TrimPrefix(d.Path, "/v2/droplets/")
				s := endedWith[id]
				switch {
				case s == nil:
					t.Fatalf("DELETE %v of a droplet no ended deployment ran on", d)
				case !s.customer && d.Token != "write":
					t.Fatalf("DELETE %v not with the write token", d)
				case s.customer && d.Token != "cust-acme":
					t.Fatalf("DELETE %v of a customer droplet not with the customer's token", d)
				case !s.due || (s.customer && !swept):
					t.Fatalf("DELETE %v for deployment %s: due=%v customer=%v", d, s.dep.ID, s.due, s.customer)
				case !hasBoth(tagsOf[id], s.env.Slug):
					t.Fatalf("DELETE %v: droplet tags %v, deployment %s of %s", d, tagsOf[id], s.dep.ID, s.env.Slug)
				}
			}
			warned := map[string]bool{}
			for _, ev := range f.events("", reaper.KindWarning) {
				warned[ev.EnvironmentSlug+"/"+ev.DeploymentID] = true
			}
			for _, s := range fleet {
				c := f.candidate(s.env.ID, s.dep.ID)
				ended := c.Status == storage.DeploymentEnded
				switch {
				case (!s.due || (s.customer && !swept)) && ended:
					t.Fatalf("deployment %s ended: due=%v customer=%v", s.dep.ID, s.due, s.customer)
				case s.reapable && s.reported && !ended:
					t.Fatalf("due deployment %s with its tagged droplet reported is still active", s.dep.ID)
				case s.due && (!s.customer || swept) && !ended && !warned[s.env.Slug+"/"+s.dep.ID]:
					t.Fatalf("due deployment %s neither ended nor warned about (tags %v)", s.dep.ID, s.tags)
				}
			}
		})
	}
}

func hasBoth(tags []string, slug string) bool {
	var chalupa, env bool
	for _, t := range tags {
		chalupa = chalupa || t == digitalocean.TagChalupa
		env = env || t == digitalocean.EnvTag(slug)
	}
	return chalupa && env
}

func storageEnv(t *testing.T, f *fixture, slug string, org int64) storage.Environment {
	t.Helper()
	return storagetest.Environment(t, f.db, storage.Environment{Slug: slug, OrgID: org})
}
