package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/ingest/envelope"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/internal/lazyre"
	"github.com/chalupa-run/chalupa/storage"
)

// Customer provider tokens (docs/operations.md, "Customer organizations"):
// a customer organization's DigitalOcean token, stored only as an envelope
// under the master key with the same envelope code as ingest keys.

// Errors of ProviderTokens.
var (
	// ErrOrganizationNotFound: no organization has the slug.
	ErrOrganizationNotFound = errors.New("organization not found")
	// ErrNotCustomer: the organization is the platform's, whose
	// credential is the platform write token, never a stored token.
	ErrNotCustomer = errors.New("the organization is not a customer organization")
	// ErrBadProviderToken: the token is empty, longer than
	// MaxProviderTokenBytes, or holds bytes a header cannot carry.
	ErrBadProviderToken = errors.New("provider token must be 1-512 printable ASCII characters without spaces")
	// ErrNoProviderToken: the organization holds no active token.
	ErrNoProviderToken = errors.New("the organization holds no active provider token")
)

// MaxProviderTokenBytes bounds a stored token: DigitalOcean's are 71
// bytes ("dop_v1_" and 64 hex); 512 leaves room for a format change.
const MaxProviderTokenBytes = 512

// Lifecycle event kinds and reasons provider tokens record.
const (
	// EventReaperArmed: a token was stored (opt-in) or replaced
	// (rotation).
	EventReaperArmed = "reaper-armed"
	// EventReaperWarning: here, a revocation (reason manual); also a sunk
	// lifecycle event whose droplet still exists (lifecycle.go).
	EventReaperWarning = "reaper-warning"
	// ReasonManual is the reason of a revocation's warning.
	ReasonManual = "manual"
)

// providerTokenAAD binds a token's envelope to its row: the organization id
// and the generation, so an envelope copied onto another organization, or
// an older generation written back, fails to open.
func providerTokenAAD(orgID, generation int64) []byte {
	return []byte("chalupa/org-provider-token/" + strconv.FormatInt(orgID, 10) + "/" + strconv.FormatInt(generation, 10))
}

// ProviderTokenState is what an API may say of a stored token: never the
// token.
type ProviderTokenState struct {
	// OrgSlug names the organization.
	OrgSlug string
	// Status is active, invalid or revoked.
	Status string
	// Generation counts the tokens stored for the organization (1 for the
	// first; a rotation adds one).
	Generation int64
	// RotatedAt is when this generation was stored; RevokedAt when it was
	// revoked (zero otherwise).
	RotatedAt, RevokedAt time.Time
}

// ProviderTokens stores, rotates, revokes and opens customer provider
// tokens. It holds the master-key sealer and nothing else of the daemon's
// secrets. Safe for concurrent use.
type ProviderTokens struct {
	db     *storage.DB
	sealer *envelope.Sealer
	clock  clockwork.Clock
}

// NewProviderTokens returns a ProviderTokens over db sealing with sealer;
// nil clock means the real clock.
func NewProviderTokens(db *storage.DB, sealer *envelope.Sealer, clock clockwork.Clock) *ProviderTokens {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &ProviderTokens{db: db, sealer: sealer, clock: clock}
}

// ValidProviderToken reports whether token may be stored: 1 to
// MaxProviderTokenBytes bytes of printable ASCII without spaces (it is
// sent in an Authorization header). The rule is apischema's
// "providerToken" pattern, the one the set-token body's schema declares
// (docs/operations.md, "OpenAPI"): ASCII characters are bytes, so its
// {1,512} is the byte bound.
func ValidProviderToken(token []byte) bool {
	return len(token) <= MaxProviderTokenBytes && providerTokenPattern.Regexp().Match(token)
}

// providerTokenPattern is apischema.Patterns["providerToken"], compiled
// on first use.
var providerTokenPattern = lazyre.New(apischema.Patterns["providerToken"])

// customerOrg reads the customer organization slug inside tx.
func customerOrg(ctx context.Context, q storage.Querier, slug string) (storage.Organization, error) {
	org, err := storage.OrganizationBySlug(ctx, q, slug)
	if errors.Is(err, storage.ErrNotFound) {
		return org, ErrOrganizationNotFound
	}
	if err != nil {
		return org, err
	}
	if org.Kind != storage.OrgCustomer {
		return org, ErrNotCustomer
	}
	return org, nil
}

// Set stores token as the organization's active provider token: the first
// one is the opt-in, a later one rotates it (the generation grows; the
// old envelope is overwritten). Either records reaper-armed under the
// organization, in the same transaction. The token is never returned,
// logged or put in an event. Errors: ErrBadProviderToken,
// ErrOrganizationNotFound, ErrNotCustomer (nothing written for any).
func (p *ProviderTokens) Set(ctx context.Context, orgSlug string, token []byte) (ProviderTokenState, error) {
	if !ValidProviderToken(token) {
		return ProviderTokenState{}, ErrBadProviderToken
	}
	now := p.clock.Now()
	var out ProviderTokenState
	err := p.db.Writer.Do(ctx, func(tx storage.Tx) error {
		org, err := customerOrg(ctx, tx, orgSlug)
		if err != nil {
			return err
		}
		gen, err := storage.NextProviderTokenGeneration(ctx, tx, org.ID)
		if err != nil {
			return err
		}
		if err := storage.PutProviderToken(ctx, tx, storage.ProviderToken{
			OrgID: org.ID, Generation: gen, MasterKeyVersion: p.sealer.Version(),
			Envelope: p.sealer.Seal(token, providerTokenAAD(org.ID, gen)),
		}, now); err != nil {
			return err
		}
		msg := "provider token stored: the customer sweep reaps this organization's droplets with it"
		if gen > 1 {
			msg = fmt.Sprintf("provider token rotated (generation %d)", gen)
		}
		if _, err := storage.InsertOrgEvent(ctx, tx, storage.OrgEvent{
			ID:    "reaper-armed:org:" + org.Slug + ":" + strconv.FormatInt(gen, 10),
			OrgID: org.ID, Kind: EventReaperArmed, Message: msg, OccurredAt: now,
		}); err != nil {
			return err
		}
		out = ProviderTokenState{OrgSlug: org.Slug, Status: storage.TokenActive, Generation: gen, RotatedAt: now.UTC().Truncate(time.Millisecond)}
		return nil
	})
	return out, err
}

// Revoke marks the organization's token revoked and records reaper-warning
// reason manual, once per generation: the sweep stops using it at once
// (a sweep already under way may finish its call). Revoking a revoked
// token changes nothing. Errors: ErrOrganizationNotFound, ErrNotCustomer,
// ErrNoProviderToken when none was ever stored.
func (p *ProviderTokens) Revoke(ctx context.Context, orgSlug string) (ProviderTokenState, error) {
	now := p.clock.Now()
	var out ProviderTokenState
	err := p.db.Writer.Do(ctx, func(tx storage.Tx) error {
		org, err := customerOrg(ctx, tx, orgSlug)
		if err != nil {
			return err
		}
		changed, err := storage.RevokeProviderToken(ctx, tx, org.ID, now)
		if errors.Is(err, storage.ErrNotFound) {
			return ErrNoProviderToken
		}
		if err != nil {
			return err
		}
		t, err := storage.ProviderTokenByOrg(ctx, tx, org.ID)
		if err != nil {
			return err
		}
		if changed {
			if _, err := storage.InsertOrgEvent(ctx, tx, storage.OrgEvent{
				ID:    "reaper-warning:org:" + org.Slug + ":revoked:" + strconv.FormatInt(t.Generation, 10),
				OrgID: org.ID, Kind: EventReaperWarning, Reason: ReasonManual, OccurredAt: now,
				Message: "provider token revoked by the operator: this organization's deployments are not reaped until a new token is set",
			}); err != nil {
				return err
			}
		}
		out = stateOf(t)
		return nil
	})
	return out, err
}

// Active returns organization orgID's active token and its generation,
// opened from its envelope. Errors: ErrNoProviderToken (none, invalid or
// revoked); an envelope that does not open (envelope.ErrOpen).
func (p *ProviderTokens) Active(ctx context.Context, orgID int64) (token []byte, generation int64, err error) {
	t, err := storage.ProviderTokenByOrg(ctx, p.db.Read, orgID)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && t.Status != storage.TokenActive) {
		return nil, 0, ErrNoProviderToken
	}
	if err != nil {
		return nil, 0, err
	}
	raw, err := p.sealer.Open(t.Envelope, providerTokenAAD(t.OrgID, t.Generation))
	if err != nil {
		return nil, 0, fmt.Errorf("open provider token of organization %d: %w", orgID, err)
	}
	return raw, t.Generation, nil
}

// States returns what may be said of every stored token, by organization
// id.
func (p *ProviderTokens) States(ctx context.Context) (map[int64]ProviderTokenState, error) {
	ts, err := storage.ListProviderTokens(ctx, p.db.Read)
	if err != nil {
		return nil, err
	}
	out := make(map[int64]ProviderTokenState, len(ts))
	for _, t := range ts {
		out[t.OrgID] = stateOf(t)
	}
	return out, nil
}

func stateOf(t storage.ProviderToken) ProviderTokenState {
	return ProviderTokenState{OrgSlug: t.OrgSlug, Status: t.Status, Generation: t.Generation, RotatedAt: t.RotatedAt, RevokedAt: t.RevokedAt}
}
