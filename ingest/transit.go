package ingest

import (
	"container/list"
	"slices"
	"sync"
	"time"
)

// The transit rule (docs/operations.md, "Heartbeats and deadlines"): a
// heartbeat's transit is its arrival minus the time its age was measured
// to (sentAt, or the signed timestamp: heartbeatReference). Its activity is
// placed at arrival − age, so a heartbeat that spent longer on its way than
// its deployment's others places the activity that much later than it was.
const (
	// TransitTolerance is how much longer than its deployment's recent
	// median transit a heartbeat may have taken and still move the
	// deployment (60 s): two agent heartbeats of delay, and the deadline
	// error a wall-clock step must exceed before the clock guard calls it
	// a step. A later one is stored but moves nothing, so neither a
	// replay nor a heartbeat delivered late extends a deadline.
	TransitTolerance = 60 * time.Second
	// transitSamples is how many of a deployment's latest transits the
	// median is taken over: five, 2.5 minutes at the agent's 30 s cadence.
	// One or two late heartbeats never move the median; an agent whose
	// clock stepped back moves it with its third heartbeat after the step.
	transitSamples = 5
	// maxTransitDeployments bounds the table (least recently heard
	// evicted): 65,536 deployments, measured at 17 MB with 20-character
	// deployment ids and 24 MB with the longest (128). An evicted
	// deployment's next heartbeat starts its history afresh and is not
	// filtered.
	maxTransitDeployments = 1 << 16
)

// transitKey names one deployment: its environment and id.
type transitKey struct {
	environmentID int64
	deploymentID  string
}

// transitEntry is one deployment's latest transits (milliseconds), oldest
// first, and its place in the eviction order.
type transitEntry struct {
	key     transitKey
	samples []int64
	elem    *list.Element
}

// transits holds each deployment's recent transits in memory, so the
// median belongs to the process that measures it: it starts empty at every
// start, which is what a restart onto a clock set differently needs (the
// old transits were measured against the old clock). Arrival is measured
// on the monotonic clock from the process's start (Service.steadyNow), so a
// wall-clock step while the process runs moves no transit either. Safe
// for concurrent use.
type transits struct {
	mu      sync.Mutex
	entries map[transitKey]*transitEntry
	order   *list.List // of *transitEntry, most recently heard at the front
	max     int
}

func newTransits(max int) *transits {
	return &transits{entries: map[transitKey]*transitEntry{}, order: list.New(), max: max}
}

// late reports whether transit is more than TransitTolerance longer than
// the deployment's recent median (lower median of its last
// transitSamples transits). A deployment with no history is never late: its
// first heartbeat, or its first after a start, is the baseline. Only the
// late side is judged: a transit shorter than the median places the
// activity earlier than it was, never later, and the deadline keeps the
// latest activity, so such a heartbeat cannot extend anything.
func (t *transits) late(k transitKey, transit time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[k]
	if !ok || len(e.samples) == 0 {
		return false
	}
	sorted := slices.Clone(e.samples)
	slices.Sort(sorted)
	median := time.Duration(sorted[(len(sorted)-1)/2]) * time.Millisecond
	return transit > median+TransitTolerance
}

// add records the transit of a stored heartbeat (late ones too, so the
// median follows an agent whose clock stepped), evicting the least
// recently heard deployment when the table is full.
func (t *transits) add(k transitKey, transit time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[k]
	if !ok {
		if len(t.entries) >= t.max {
			oldest := t.order.Back()
			delete(t.entries, oldest.Value.(*transitEntry).key)
			t.order.Remove(oldest)
		}
		e = &transitEntry{key: k, samples: make([]int64, 0, transitSamples)}
		e.elem = t.order.PushFront(e)
		t.entries[k] = e
	} else {
		t.order.MoveToFront(e.elem)
	}
	if len(e.samples) == transitSamples {
		copy(e.samples, e.samples[1:])
		e.samples = e.samples[:transitSamples-1]
	}
	e.samples = append(e.samples, transit.Milliseconds())
}

// restart replaces the deployment's history with transit alone: its
// agent's clock stepped back (a negative activity age), so the transits
// measured against its old clock no longer describe it.
func (t *transits) restart(k transitKey, transit time.Duration) {
	t.mu.Lock()
	if e, ok := t.entries[k]; ok {
		e.samples = e.samples[:0]
	}
	t.mu.Unlock()
	t.add(k, transit)
}

// size is how many deployments the table holds.
func (t *transits) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}
