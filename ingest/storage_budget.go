package ingest

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/chalupa-run/chalupa/storage"
)

// Storage budget rules (docs/operations.md, "Quotas").
const (
	// DefaultEnvironmentStorageBytes is an environment's storage budget
	// (bytes charged for runs, telemetry and producer lifecycle events):
	// 4 GiB. One honest environment — 100 deployments streaming 14 days of
	// minute windows with nothing folded yet (1.48 GB), 1,000 CI runs of
	// four artifacts each (0.14 GB) and 4,000 producer events each
	// (0.07 GB) per deployment — holds 1.7 GB, so the budget leaves 2.5×
	// room; the run and event caps alone allowed ~29 GB.
	DefaultEnvironmentStorageBytes int64 = 4 << 30
	// MaxEnvironmentStorageBytes is the largest budget accepted: 1 TiB
	// (larger is unlimited in all but name; 0 is unlimited).
	MaxEnvironmentStorageBytes int64 = 1 << 40
	// StorageQuotaRetryAfter is the Retry-After of a storage_quota refusal (10
	// minutes). The budget frees only when retention folds detail (hourly)
	// or the operator erases telemetry (any moment): ten minutes keeps a
	// spooling agent from waiting an hour after the operator made room,
	// and a retry refused again costs no write.
	StorageQuotaRetryAfter = 10 * time.Minute
	// storageHintTTL is how long a counter value read in a writer unit
	// may refuse later requests before the writer (the counter only falls
	// through retention and erase, which do not tell the hints): after
	// it, one request goes through the writer and reads the counter
	// again.
	storageHintTTL = 5 * time.Second
)

// storageHints is the in-memory copy of environments' storage counters,
// as last read inside a writer unit: it refuses a request that cannot fit
// before the writer, so a flood at the budget never reaches the single
// writer. The unit's own check is the exact one.
type storageHints struct {
	mu sync.Mutex
	m  map[int64]storageHint
}

type storageHint struct {
	bytes int64
	at    time.Time
}

func newStorageHints() *storageHints { return &storageHints{m: map[int64]storageHint{}} }

// set records the counter value read at now.
func (h *storageHints) set(environmentID, bytes int64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[environmentID] = storageHint{bytes: bytes, at: now}
}

// full reports whether the environment's counter, read less than
// storageHintTTL ago, leaves no room for charge bytes under budget.
func (h *storageHints) full(environmentID, charge, budget int64, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[environmentID]
	if !ok || now.Sub(e.at) >= storageHintTTL {
		delete(h.m, environmentID)
		return false
	}
	return e.bytes+charge > budget
}

// storageRefusal is the answer when an environment's storage budget is
// reached: 429 storage_quota with Retry-After.
func (s *Service) storageRefusal() *Refusal {
	rf := refuse(http.StatusTooManyRequests, "storage_quota",
		"environment storage budget reached (%d bytes); retention or an erase frees it", s.quotas.EnvironmentStorageBytes)
	rf.RetryAfter, rf.Quota = int(StorageQuotaRetryAfter/time.Second), QuotaEnvironmentStorage
	return rf
}

// admitStorage is the budget check before the writer: a request whose body
// names the key's environment and that cannot fit, judging by the counter
// a recent unit read, is refused at once with nothing written. charge is
// what the request would add (bytes; a lower bound where the unit may add
// more).
func (s *Service) admitStorage(v Verified, slug string, charge int64) *Refusal {
	if s.quotas.EnvironmentStorageBytes <= 0 || v.key == nil || slug != v.key.EnvironmentSlug {
		return nil
	}
	if !s.storage.full(v.key.EnvironmentID, charge, s.quotas.EnvironmentStorageBytes, s.clock.Now()) {
		return nil
	}
	rf := s.storageRefusal()
	s.noteQuota(rf, slug, "")
	return rf
}

// checkStorage is the exact budget check, called in the writer unit after
// the request's rows were written (they moved the counter by about charge
// bytes): beyond the budget it returns the refusal, which rolls the unit
// back whole, nonce included (docs/operations.md, "Quotas").
func (s *Service) checkStorage(ctx context.Context, tx storage.Querier, environmentID int64, slug string, charge int64) error {
	if s.quotas.EnvironmentStorageBytes <= 0 {
		return nil
	}
	n, err := storage.CheckEnvironmentStorage(ctx, tx, environmentID, s.quotas.EnvironmentStorageBytes)
	if errors.Is(err, storage.ErrStorageQuota) {
		// The refusal rolls this request's rows back: the hint keeps what
		// stays.
		s.storage.set(environmentID, n-charge, s.clock.Now())
		rf := s.storageRefusal()
		s.noteQuota(rf, slug, "")
		return rf
	}
	if err == nil {
		s.storage.set(environmentID, n, s.clock.Now())
	}
	return err
}
