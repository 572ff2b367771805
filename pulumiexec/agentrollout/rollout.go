package agentrollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// Errors of Start.
var (
	// ErrRolloutRunning: a rollout is already running; nothing started.
	ErrRolloutRunning = errors.New("an agent rollout is already running")
	// ErrStopped: the manager is closed (the daemon stops).
	ErrStopped = errors.New("the daemon is stopping")
)

// Manager runs the daemon's agent upgrades in its own lifetime, not the
// caller's: a rollout (Start) and a single box's upgrade (UpgradeBox) go
// on when the operator's terminal or connection goes, and Close cuts them
// when the daemon stops (docs/operations.md, "Agent install", under
// Upgrade).
type Manager struct {
	// Upgrader upgrades each box.
	Upgrader *Upgrader
	// Instance names this process in the rollouts it runs.
	Instance string

	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (m *Manager) init() {
	m.once.Do(func() {
		m.ctx, m.cancel = context.WithCancel(context.Background())
		m.Upgrader.init()
	})
}

// Recover settles what a stopped process left: its running rollouts are
// failed ("interrupted") and its boxes left upgrading become
// upgrade-failed (Settle), each raising agent-upgrade-failed (alerts.go).
// Call it at start, before any upgrade. Errors: database faults.
func (m *Manager) Recover(ctx context.Context) error {
	m.init()
	db, now := m.Upgrader.DB, m.Upgrader.Clock.Now()
	if err := db.Writer.Do(ctx, func(tx storage.Tx) error {
		_, err := storage.FailInterruptedRollouts(ctx, tx, m.Instance, "interrupted: chalupa stopped during the rollout; boxes it was upgrading are marked upgrade-failed", now)
		return err
	}); err != nil {
		return err
	}
	boxes, err := settle(ctx, db, now)
	for _, b := range boxes {
		m.Upgrader.reportBox(ctx, b.ID, b.Name, false)
	}
	return err
}

// Close cuts every upgrade in progress and waits for them to return.
func (m *Manager) Close() {
	m.init()
	m.cancel()
	m.wg.Wait()
}

// UpgradeBox upgrades box (Upgrader.Box) in the manager's lifetime and
// waits for the outcome, or for ctx: the upgrade goes on without the
// caller. Errors: Upgrader.Box's; ctx's; ErrStopped.
func (m *Manager) UpgradeBox(ctx context.Context, box storage.Box) (Outcome, error) {
	m.init()
	if m.ctx.Err() != nil {
		return Outcome{}, ErrStopped
	}
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		out, err := m.Upgrader.Box(m.ctx, box)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
}

// Start records a rollout of the release to boxes (in their order) with
// batch boxes at a time after the first, and runs it in the manager's
// lifetime. Errors: ErrRolloutRunning; ErrStopped; database faults.
func (m *Manager) Start(ctx context.Context, env string, boxes []storage.Box, batch int) (storage.AgentRollout, error) {
	m.init()
	if m.ctx.Err() != nil {
		return storage.AgentRollout{}, ErrStopped
	}
	u := m.Upgrader
	r := storage.AgentRollout{ID: ulid.Make().String(), Environment: env, Version: u.Release.Version, Batch: batch,
		Status: storage.RolloutRunning, InstanceID: m.Instance, CreatedAt: u.Clock.Now()}
	p := &progress{m: m, id: r.ID}
	// Boxes with nothing to upgrade are skipped at once: they take no
	// place in the first box or a batch.
	var todo []storage.Box
	for _, b := range boxes {
		if why := SkipReason(b); why != "" {
			p.sum.Skipped = append(p.sum.Skipped, Outcome{Box: b.Name, DropletID: b.Resources.DropletID, Status: StatusSkipped, Reason: why})
			continue
		}
		todo = append(todo, b)
		p.sum.NotTried = append(p.sum.NotTried, b.Name)
	}
	r.Summary = p.json()
	if err := u.DB.Writer.Do(ctx, func(tx storage.Tx) error { return storage.InsertAgentRollout(ctx, tx, r) }); err != nil {
		if errors.Is(err, storage.ErrConflict) {
			return r, ErrRolloutRunning
		}
		return r, err
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		p.run(todo, batch)
	}()
	return r, nil
}

// progress is a running rollout's account, stored after each box.
type progress struct {
	m   *Manager
	id  string
	mu  sync.Mutex
	sum adminapi.AgentRolloutSummary
}

// json is the account as stored: every list present, empty or not.
func (p *progress) json() []byte {
	s := p.sum
	for _, l := range []*[]Outcome{&s.Upgraded, &s.Skipped, &s.Failed} {
		if *l == nil {
			*l = []Outcome{}
		}
	}
	for _, l := range []*[]string{&s.Running, &s.NotTried} {
		if *l == nil {
			*l = []string{}
		}
	}
	b, _ := json.Marshal(s)
	return b
}

// run upgrades the boxes: one box at a time until one is upgraded (the first box proves the release),
// then batch boxes at once; it stops after the first batch with a
// failure, leaving the rest not tried, and finishes the rollout.
func (p *progress) run(boxes []storage.Box, batch int) {
	ctx := p.m.ctx
	canary := true
	for len(boxes) > 0 && ctx.Err() == nil {
		n := batch
		if canary {
			n = 1
		}
		n = min(n, len(boxes))
		now, rest := boxes[:n], boxes[n:]
		boxes = rest
		outs := p.batch(ctx, now)
		failed := false
		for _, o := range outs {
			failed = failed || o.Status == StatusFailed
			canary = canary && o.Status != StatusUpgraded
		}
		if failed {
			p.finish(storage.RolloutFailed, "stopped at the first box whose upgrade failed: the boxes not tried keep their version")
			return
		}
	}
	if ctx.Err() != nil {
		p.finish(storage.RolloutFailed, "interrupted: chalupa stopped during the rollout; boxes it was upgrading are marked upgrade-failed at the next start")
		return
	}
	p.finish(storage.RolloutSucceeded, "")
}

// batch upgrades boxes at once and records each outcome as it comes.
func (p *progress) batch(ctx context.Context, boxes []storage.Box) []Outcome {
	p.mu.Lock()
	for _, b := range boxes {
		p.sum.NotTried = remove(p.sum.NotTried, b.Name)
		p.sum.Running = append(p.sum.Running, b.Name)
	}
	p.mu.Unlock()
	p.store(ctx)
	outs := make([]Outcome, len(boxes))
	var wg sync.WaitGroup
	for i, b := range boxes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := p.m.Upgrader.Box(ctx, b)
			if err != nil && ctx.Err() == nil {
				out = Outcome{Box: b.Name, DropletID: b.Resources.DropletID, Status: StatusFailed, Reason: ReasonUpgradeError,
					Detail: fmt.Sprintf("the upgrade could not start: %v", err)}
			}
			outs[i] = out
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.sum.Running = remove(p.sum.Running, b.Name)
			switch out.Status {
			case StatusUpgraded:
				p.sum.Upgraded = append(p.sum.Upgraded, out)
			case StatusSkipped:
				p.sum.Skipped = append(p.sum.Skipped, out)
			default:
				p.sum.Failed = append(p.sum.Failed, out)
			}
			p.mu.Unlock()
			p.store(ctx)
		}()
	}
	wg.Wait()
	return outs
}

// store writes the account so far (a fault is logged: the next store, or
// the finish, writes it again).
func (p *progress) store(ctx context.Context) {
	p.write(ctx, storage.RolloutRunning, "")
}

func (p *progress) finish(status, errText string) {
	p.write(context.Background(), status, errText)
}

func (p *progress) write(ctx context.Context, status, errText string) {
	u := p.m.Upgrader
	p.mu.Lock()
	b := p.json()
	p.mu.Unlock()
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := u.DB.Writer.Do(wctx, func(tx storage.Tx) error {
		return storage.UpdateAgentRollout(wctx, tx, p.id, status, b, errText, u.Clock.Now())
	}); err != nil {
		u.Log.Error().Err(err).Str("rollout", p.id).Msg("storing the agent rollout's account")
	}
}

// remove returns list without name.
func remove(list []string, name string) []string {
	out := list[:0]
	for _, s := range list {
		if s != name {
			out = append(out, s)
		}
	}
	return out
}
